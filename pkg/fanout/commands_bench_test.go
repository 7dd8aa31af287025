//go:build unix

package fanout

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/pkg/membership"
)

// BenchmarkApplyLeaveBatches: fetches of leaveBatch leaves of users never
// seen before, applied back to back on a store synced to this machine's
// disk with the syncer running, as in a bulk leave; after each fetch the
// outbox is taken and deleted, as the signals loop does once it produced
// it. ns/leave is the applier's time per fresh leave (1e9/ns/leave leaves
// a second), cpu-ns/leave the process's CPU time per leave, Pebble's
// flushes and compactions included (less sensitive than ns/leave to other
// load on a shared machine); ns/op is per fetch.
func BenchmarkApplyLeaveBatches(b *testing.B) {
	const leaveBatch = 1000
	st := newCommandsStateOn(b, nil, b.TempDir(), &membership.Options{})
	defer st.store.Close()
	c := newClaim(0, 1, 0, 0)
	c.recovery.done = true
	st.a.claims.put(c)
	stop := st.a.startSyncer(func(err error) { b.Error(err) })
	ctx := context.Background()
	var offset int64
	recs := make([]*kgo.Record, leaveBatch)
	b.ReportAllocs()
	cpu0 := cpuTime(b)
	for b.Loop() {
		for i := range recs {
			ms := 1_000_000 + offset
			recs[i] = &kgo.Record{Topic: "membership.commands", Offset: offset, Key: fmt.Appendf(nil, "%d", offset+1),
				Timestamp: time.UnixMilli(ms),
				Value:     fmt.Appendf(nil, `{"op":"leave","user_id":%d,"at_ns":%d}`, offset+1, ms*int64(time.Millisecond))}
			offset++
		}
		fp := kgo.FetchTopicPartition{Topic: "membership.commands", FetchPartition: kgo.FetchPartition{Partition: 0, Records: recs}}
		if err := st.a.applyFetched(ctx, []kgo.FetchTopicPartition{fp}); err != nil {
			b.Fatal(err)
		}
		// As the signals loop does: take what is synced, produce it, then
		// delete it from the store.
		if items := st.a.outbox.take(); len(items) > 0 {
			if err := st.a.outbox.delivered(items[len(items)-1].seq); err != nil {
				b.Fatal(err)
			}
		}
	}
	if err := stop(); err != nil {
		b.Fatal(err)
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(offset), "ns/leave")
	b.ReportMetric(float64(cpuTime(b)-cpu0)/float64(offset), "cpu-ns/leave")
}

// cpuTime returns the CPU time this process has used, user and system, in
// nanoseconds.
func cpuTime(b *testing.B) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
