package fanout

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/topics"
)

// TestBoundary pins rule C4: a command's boundary, and the two reasons it
// can be refused for. Each case reads only the record, so a replay decides
// the same.
func TestBoundary(t *testing.T) {
	const skew = 5 * time.Second
	rec := time.UnixMilli(1764633600000)
	recNs := uint64(rec.UnixNano())
	for _, tc := range []struct {
		name   string
		cmd    topics.Command
		ts     time.Time
		want   uint64
		reason topics.Reason
	}{
		{"record timestamp stands in", topics.Command{}, rec, recNs, ""},
		{"at_ns", topics.Command{AtNs: recNs - 1e9, HasAt: true}, rec, recNs - 1e9, ""},
		{"at_ns in the past", topics.Command{AtNs: 0, HasAt: true}, rec, 0, ""},
		{"at_ns at the skew", topics.Command{AtNs: recNs + uint64(skew), HasAt: true}, rec, recNs + uint64(skew), ""},
		{"at_ns beyond the skew", topics.Command{AtNs: recNs + uint64(skew) + 1, HasAt: true}, rec, 0, topics.ReasonCommandFutureSkew},
		{"the OpenEnd sentinel", topics.Command{AtNs: math.MaxUint64, HasAt: true}, rec, 0, topics.ReasonCommandAtOutOfRange},
		{"above 2^63-1", topics.Command{AtNs: 1 << 63, HasAt: true}, rec, 0, topics.ReasonCommandAtOutOfRange},
		{"negative record timestamp, no at_ns", topics.Command{}, time.UnixMilli(-1), 0, topics.ReasonCommandAtOutOfRange},
		{"negative record timestamp, at_ns", topics.Command{AtNs: 5, HasAt: true}, time.UnixMilli(-1), 0, topics.ReasonCommandFutureSkew},
		{"record timestamp beyond 2^63-1 ns, no at_ns", topics.Command{}, time.UnixMilli(math.MaxInt64 / 1000), 0, topics.ReasonCommandAtOutOfRange},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, reason, err := boundary(tc.cmd, tc.ts, skew)
			if reason != tc.reason || (reason == "") != (err == nil) || (reason == "" && got != tc.want) {
				t.Fatalf("boundary = %d, %q, %v; want %d, %q", got, reason, err, tc.want, tc.reason)
			}
		})
	}
}

// TestOutboxQueuedBeforeApplied holds the hand-off the signals loop relies
// on (loop.drainOutbox): a command's records are in the outbox before its
// claim's applied offset passes it. Read the other way round, a cycle
// could commit offset metadata saying the commands were judged without
// their changelog records; a kill before the next cycle then lost them for
// good, since a restart replays only from the judged offset (a chaos kill
// run had users with no changelog record at all). A reader races the
// applier as the loop does: applied first, then the outbox.
func TestOutboxQueuedBeforeApplied(t *testing.T) {
	st := newCommandsState(t, nil)
	c := newClaim(0, 1, 0, 0)
	c.recovery.done = true
	st.a.claims.put(c)
	const n = 600
	stop := make(chan struct{})
	found := make(chan string, 1)
	go func() {
		taken := make(map[int64]bool) // command offsets whose changelog record was taken
		for {
			select {
			case <-stop:
				found <- ""
				return
			default:
			}
			applied := c.applied.Load()
			for _, it := range st.a.outbox.take() {
				taken[it.e.TimestampNs/int64(time.Millisecond)-1_000_000] = true
			}
			for o := applied - 1; o >= 0 && o >= applied-4; o-- {
				if !taken[o] {
					found <- fmt.Sprintf("applied offset %d read before the record of command %d was queued", applied, o)
					return
				}
			}
		}
	}()
	for i := range int64(n) {
		r := &kgo.Record{Topic: "membership.commands", Offset: i, Key: []byte(strconv.FormatInt(i+1, 10)),
			Timestamp: time.UnixMilli(1_000_000 + i),
			Value:     fmt.Appendf(nil, `{"op":"leave","user_id":%d,"at_ns":%d}`, i+1, (1_000_000+i)*int64(time.Millisecond))}
		fp := kgo.FetchTopicPartition{Topic: r.Topic, FetchPartition: kgo.FetchPartition{Partition: 0, Records: []*kgo.Record{r}}}
		if err := st.a.applyFetched(context.Background(), []kgo.FetchTopicPartition{fp}); err != nil {
			t.Fatal(err)
		}
		select {
		case msg := <-found:
			t.Fatal(msg)
		default:
		}
	}
	close(stop)
	if msg := <-found; msg != "" {
		t.Fatal(msg)
	}
}
