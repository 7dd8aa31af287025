package integration

import (
	"fmt"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/pkg/fanout"
	"github.com/cohortgate/cohortgate/topics"
)

// holdFS is the operating system's file system, on which opening the gate
// snapshot at path waits until released: a load made slow at will.
type holdFS struct {
	vfs.FS
	path    string
	opening chan struct{} // closed once the load waits
	release chan struct{}
	once    sync.Once
	freed   sync.Once
}

func (h *holdFS) Open(name string, opts ...vfs.OpenOption) (vfs.File, error) {
	if name == h.path {
		h.once.Do(func() { close(h.opening) })
		<-h.release
	}
	return h.FS.Open(name, opts...)
}

func (h *holdFS) unhold() { h.freed.Do(func() { close(h.release) }) }

// assignWatch is a franz-go logger that notes when the group consumer
// enters its OnPartitionsAssigned callback with partitions (franz-go logs
// it at debug level just before the call).
type assignWatch struct {
	entered chan struct{}
	once    sync.Once
}

func (w *assignWatch) Level() kgo.LogLevel { return kgo.LogLevelDebug }

func (w *assignWatch) Log(_ kgo.LogLevel, msg string, keyvals ...any) {
	if msg != "entering OnPartitionsAssigned" {
		return
	}
	for i := 0; i+1 < len(keyvals); i += 2 {
		if keyvals[i] == "with" && strings.Contains(fmt.Sprint(keyvals[i+1]), "[") && !strings.Contains(fmt.Sprint(keyvals[i+1]), "[]") {
			w.once.Do(func() { close(w.entered) })
		}
	}
}

// TestAssignmentDuringSnapshotLoad: a start whose gate snapshot is older
// than the store (a user left after it) gets its partitions from the
// group while the gate is still loading. The claims wait for the load
// (where their commands start depends on it), so the commands since the
// snapshot are read again and the user who left after it is gated: none
// of that user's signals after the leave is forwarded, and the state
// equals a replay's. A claim made during the load would start at the
// store's checkpoint, past the leave, and forward them.
func TestAssignmentDuringSnapshotLoad(t *testing.T) {
	e := newEnv(t, 2)
	dir := t.TempDir()
	t0 := base()
	const users = 8
	cfg := e.config()
	cfg.GateSnapshot = filepath.Join(t.TempDir(), "gate.snapshot")

	// A clean stop writes the snapshot of users 1 to 6's leaves.
	var first restarts
	firstCfg := cfg
	first.listen(&firstCfg)
	pr := e.start(dir, firstCfg)
	pr.waitReady(t, 2)
	for u := uint64(1); u <= 6; u++ {
		e.command(topics.Leave, u, t0.Add(time.Duration(u)*time.Second))
	}
	waitLeft(t, pr, t0, 1, 2, 3, 4, 5, 6)
	if err := pr.stop(t); err != nil {
		t.Fatal(err)
	}
	if len(first.saved) != 1 || first.saved[0].Err != nil {
		t.Fatalf("saved %+v, want the snapshot written at the stop", first.saved)
	}

	// A run without the snapshot: user 7 leaves, and the store moves past
	// the snapshot's label.
	noSnap := cfg
	noSnap.GateSnapshot = ""
	pr = e.start(dir, noSnap)
	pr.waitReady(t, 2)
	e.command(topics.Leave, 7, t0.Add(7*time.Second))
	waitLeft(t, pr, t0, 7)
	if err := pr.stop(t); err != nil {
		t.Fatal(err)
	}

	// The start under test: the load waits until the group has handed the
	// partitions over.
	hold := &holdFS{FS: vfs.Default, path: cfg.GateSnapshot, opening: make(chan struct{}), release: make(chan struct{})}
	watch := &assignWatch{entered: make(chan struct{})}
	var ev restarts
	var mu sync.Mutex
	var order []string
	third := cfg
	third.Testing.SnapshotFS = hold
	third.KafkaOpts = append(third.KafkaOpts, kgo.WithLogger(watch))
	ev.listen(&third)
	restored := third.EventListener.Restored
	third.EventListener.Restored = func(i fanout.RestoredInfo) {
		mu.Lock()
		order = append(order, "restored")
		mu.Unlock()
		restored(i)
	}
	assigned := make(chan struct{}, 16)
	third.EventListener.PartitionsAssigned = func(i fanout.PartitionsInfo) {
		mu.Lock()
		order = append(order, fmt.Sprintf("assigned %v", i.Partitions))
		mu.Unlock()
		assigned <- struct{}{}
	}
	pr = e.start(dir, third)
	t.Cleanup(hold.unhold) // before the stop (cleanups run last first)
	for _, ch := range []chan struct{}{hold.opening, watch.entered} {
		select {
		case <-ch:
		case <-time.After(60 * time.Second):
			t.Fatal("the load or the assignment did not come within 60s")
		}
	}
	// Signals of every user, one second before and after each leave,
	// produced while the gate loads.
	var sigs []sig
	for u := uint64(1); u <= users; u++ {
		for _, d := range []time.Duration{time.Duration(u)*time.Second - 500*time.Millisecond, time.Duration(u)*time.Second + 500*time.Millisecond} {
			// Users 1 to 7 left at their number in seconds; user 8 never.
			sigs = append(sigs, sig{user: u, at: d, forward: u == users || d < time.Duration(u)*time.Second})
		}
	}
	wantFwd := e.produceSignals(t0, sigs)
	// The callback was entered while the load waits: give a claim made
	// without waiting for the load the time to show (an event), bounded.
	select {
	case <-assigned:
		t.Error("partitions claimed while the gate was loading")
	case <-time.After(2 * time.Second):
	}
	hold.unhold()
	pr.waitReady(t, 2)
	if src := ev.source(t); src != "snapshot" || len(ev.restored[0].Regate) == 0 {
		t.Fatalf("restored %v from the %s, want the older snapshot with commands to apply again", ev.restored[0], src)
	}
	mu.Lock()
	if len(order) == 0 || order[0] != "restored" {
		t.Errorf("events %v, want the restore before any assignment", order)
	}
	mu.Unlock()

	e.waitDecided()
	got := membersOf(t, pr, users)
	if gotFwd := e.forwardedValues(); !slices.Equal(gotFwd, wantFwd) {
		t.Errorf("forwarded %v, want %v", gotFwd, wantFwd)
	}
	if err := pr.stop(t); err != nil {
		t.Fatal(err)
	}
	want := replayMembers(t, e, cfg, users)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("after the start: %+v\nreplay: %+v", got, want)
	}
}

// waitLeft waits until each user is left on pr at t0 plus its number in
// seconds.
func waitLeft(t *testing.T, pr *proc, t0 time.Time, users ...uint64) {
	t.Helper()
	eventually(t, 30*time.Second, func() error {
		for _, u := range users {
			m, err := pr.Member(u)
			if err != nil {
				return err
			}
			if s := stateOf(m); s.Status != "left" || s.LeftAt != uint64(t0.Add(time.Duration(u)*time.Second).UnixNano()) {
				return fmt.Errorf("user %d is %+v, not left yet", u, s)
			}
		}
		return nil
	})
}
