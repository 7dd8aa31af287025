package fanout

import (
	"context"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cohortgate/cohortgate/pkg/membership"
)

// heldRestore is a store whose gate restore waits until release is
// closed: a scan of 100M members takes minutes.
type heldRestore struct {
	Store
	release chan struct{}
}

func (s heldRestore) Restore(ctx context.Context, fn func(membership.Member) error) (membership.RestoreStats, error) {
	select {
	case <-s.release:
	case <-ctx.Done():
		return membership.RestoreStats{}, ctx.Err()
	}
	return s.Store.Restore(ctx, fn)
}

// TestLongRestoreIsNoStall: while the gate is restored (a scan of the
// store takes minutes at 100M members) the processor is not ready, and the
// group's assignment waits for the restore, so no cycle ends. That is no
// stall: the processor halted after StallHalt, was started again, scanned
// again and halted again, never to be ready. Once the restore ends, a
// stall counts from then.
func TestLongRestoreIsNoStall(t *testing.T) {
	c, set := fakeCluster(t, 1)
	var stalls atomic.Int32
	st := heldRestore{Store: memStore(t), release: make(chan struct{})}
	// Long enough that, after the release, a loaded machine under -race
	// joins the group and ends a first cycle within it (500ms failed once
	// at a load of 30: "halting: no cycle ended" after the restore).
	const halt = 2 * time.Second
	p := newOnFake(t, c, set, Config{
		CreateTopics: true, Partitions: 1,
		ExactlyOnce: true, TransactionalID: "restore-stall-test",
		GateSnapshot:   filepath.Join(t.TempDir(), "gate.snapshot"),
		CommitInterval: 20 * time.Millisecond, StallTimeout: halt / 2, StallHalt: halt,
		EventListener: EventListener{Stall: func(StallInfo) { stalls.Add(1) }},
	}, st)
	r := runTillEnd(t, p)
	// Held for several times StallHalt: without the exemption the run
	// halts within one.
	held := time.Now().Add(3 * halt)
	for time.Now().Before(held) {
		select {
		case <-r.done:
			t.Fatalf("Run returned while the gate was restored: %v", r.err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	if n := stalls.Load(); n != 0 {
		t.Errorf("%d stall events while the gate was restored; want none", n)
	}
	if ok, _ := p.Ready(); ok {
		t.Error("ready while the gate is restored")
	}
	close(st.release)
	waitReady(t, p)
}
