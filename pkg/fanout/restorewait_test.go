package fanout

import (
	"context"
	"testing"
	"testing/synctest"

	"github.com/cohortgate/cohortgate/topics"
)

// TestClaimWaitsForTheRestore: the group may assign partitions while the
// gate is still being loaded from a snapshot. Where a claim's commands
// start depends on that load (a snapshot older than the store has the
// commands since its label read again, to gate the users they touched),
// so the claim waits for the restore to end: made before it, it would
// start at the store's checkpoint, and a user who left after the
// snapshot would never be gated. With the wait removed, the partition is
// claimed while the restore runs, at the checkpoint.
func TestClaimWaitsForTheRestore(t *testing.T) {
	o := newTestOwnership(t, &flakyOffsets{meta: map[string]map[int32]string{string(topics.Defaults().Signals): {0: "1000:100"}}})
	setCheckpoint(t, o, 0, 40)
	o.regate = &regate{}
	synctest.Test(t, func(t *testing.T) {
		o.regate.reset() // the restore starts
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan int64, 1)
		go func() {
			start := o.claim(ctx, []int32{0})
			s, ok := start[0]
			if !ok {
				done <- -1
				return
			}
			done <- s.EpochOffset().Offset
		}()
		synctest.Wait() // the claim is as far as it goes while the restore runs
		if o.claims.get(0) != nil {
			t.Fatal("partition 0 claimed while the gate was being restored")
		}
		select {
		case at := <-done:
			t.Fatalf("the claim returned (start %d) while the gate was being restored", at)
		default:
		}
		// The restore loads a snapshot labelled at offset 30 of partition
		// 0; the store's checkpoint is 40.
		o.regate.set(map[int32]int64{0: 30}, map[int32]int64{0: 40})
		o.regate.finish()
		if at := <-done; at != 30 {
			t.Fatalf("the commands of partition 0 start at %d, want 30 (the snapshot's label)", at)
		}
		if c := o.claims.get(0); c == nil || c.regateUntil != 40 {
			t.Fatalf("claim %+v, want one re-gating through offset 40", c)
		}
	})
}

// setCheckpoint sets the store's commands checkpoint of part.
func setCheckpoint(t *testing.T, o *ownership, part int32, next int64) {
	t.Helper()
	b := o.store.NewBatch()
	defer b.Close()
	if err := b.SetCheckpoint(string(o.cfg.Topics.Commands), part, next); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
}
