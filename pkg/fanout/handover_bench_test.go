package fanout

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/pkg/gate"
	"github.com/cohortgate/cohortgate/pkg/membership"
	"github.com/cohortgate/cohortgate/topics"
)

// BenchmarkRestore times a restore of users (each with one closed
// episode, as after a leave and a rejoin) from changelog records already
// read, into an empty store on disk: decoding the headers, the import and
// the gate. It prints the figures per user.
func BenchmarkRestore(b *testing.B) {
	for _, users := range []int{100_000, 1_000_000} {
		b.Run(fmt.Sprint(users), func(b *testing.B) {
			// The records, as the first owner wrote them.
			src, err := membership.Open(b.TempDir(), &membership.Options{NoSync: true})
			if err != nil {
				b.Fatal(err)
			}
			defer src.Close()
			var recs []*kgo.Record
			bt := src.NewBatch()
			for u := range uint64(users) {
				if _, err := bt.Leave(u, 100+u); err != nil {
					b.Fatal(err)
				}
				if _, err := bt.Rejoin(u, 200+u); err != nil {
					b.Fatal(err)
				}
				note := topics.AppendNote(nil, topics.Note{Command: &topics.CommandRef{Op: "rejoin", AtNs: 200 + u, Topic: "membership.commands", Offset: int64(2 * u), Changed: true},
					Receipt: &topics.Receipt{AppliedAtNs: time.Now().UnixNano(), SignalsOffset: -1}})
				if err := bt.SetNote(u, note); err != nil {
					b.Fatal(err)
				}
				if u%10000 == 9999 || u == uint64(users)-1 {
					if err := bt.Commit(); err != nil {
						b.Fatal(err)
					}
					bt = src.NewBatch()
				}
			}
			bt.Close()
			bt = src.NewBatch()
			for u := range uint64(users) {
				h, err := bt.AppendDump(appendRestoreHeader(nil, 1, int64(2*u+1)), u)
				if err != nil {
					b.Fatal(err)
				}
				recs = append(recs, &kgo.Record{Key: topics.AppendUserID(nil, u), Value: []byte(`{"late_leaves":[]}`),
					Headers: []kgo.RecordHeader{{Key: topics.HeaderRestore, Value: h}}})
			}
			bt.Close()
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				store, err := membership.Open(b.TempDir(), nil)
				if err != nil {
					b.Fatal(err)
				}
				cfg := Config{Brokers: []string{"x:1"}, Logger: slog.New(slog.DiscardHandler)}
				cfg.EnsureDefaults()
				ev := EventListener{}
				ev.EnsureDefaults()
				rec := &recoverer{src: &fakeChangelog{recs: recs}, store: store, ev: ev, log: cfg.Logger}
				r := &restorer{cfg: &cfg, store: store, gate: gate.New(), rec: rec, ev: ev}
				c := newClaim(0, 1, 0, 0)
				c.judgedBelow, c.changelogID, c.restore = int64(2*users), "cl", true
				b.StartTimer()
				start := time.Now()
				var info HandoverInfo
				why, err := r.restore(context.Background(), c, int64(2*users), &info)
				if err != nil || why != nil {
					b.Fatal(err, why)
				}
				b.ReportMetric(float64(time.Since(start).Nanoseconds())/float64(users), "ns/user")
				b.StopTimer()
				store.Close()
			}
		})
	}
}
