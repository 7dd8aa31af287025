package membership

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// script is a command sequence that exercises every transition.
var script = []struct {
	op       Op
	user, at uint64
}{
	{OpLeave, 1, 100}, {OpRejoin, 1, 200}, {OpLeave, 1, 150}, {OpRejoin, 1, 300},
	{OpLeave, 2, 10}, {OpLeave, 2, 20}, {OpRejoin, 3, 5}, {OpLeave, 1, 100}, {OpLeave, 1, 400},
}

// TestIdempotent applies each command of the script twice in a row and checks
// that the second application changes no byte of the store and reports no
// change.
func TestIdempotent(t *testing.T) {
	s := openMem(t)
	for i, c := range script {
		b := s.NewBatch()
		if _, err := b.Apply(Command{Op: c.op, UserID: c.user, AtNs: c.at}); err != nil {
			t.Fatal(err)
		}
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}
		before := dump(t, s)
		b = s.NewBatch()
		ch, err := b.Apply(Command{Op: c.op, UserID: c.user, AtNs: c.at})
		if err != nil {
			t.Fatalf("command %d again: %v", i, err)
		}
		if ch.Changed {
			t.Errorf("command %d again: Changed", i)
		}
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}
		if after := dump(t, s); after != before {
			t.Fatalf("command %d (%v user %d at %d) applied twice changed the store\nonce:\n%s\ntwice:\n%s", i, c.op, c.user, c.at, before, after)
		}
	}
}

// TestDeterministic applies the script to two stores, one command per commit
// and all in one batch, and compares every byte.
func TestDeterministic(t *testing.T) {
	a, b := openMem(t), openMem(t)
	batch := b.NewBatch()
	defer batch.Close()
	for _, c := range script {
		var err error
		if c.op == OpLeave {
			_, err = a.Leave(c.user, c.at)
		} else {
			_, err = a.Rejoin(c.user, c.at)
		}
		if err != nil {
			t.Fatal(err)
		}
		if _, err := batch.Apply(Command{Op: c.op, UserID: c.user, AtNs: c.at}); err != nil {
			t.Fatal(err)
		}
	}
	if err := batch.Commit(); err != nil {
		t.Fatal(err)
	}
	if da, db := dump(t, a), dump(t, b); da != db {
		t.Fatalf("stores differ\none by one:\n%s\none batch:\n%s", da, db)
	}
}

// TestLeaveAgainWritesNothing: a closed episode's leave delivered again
// after the rejoin changes no byte, through the Store and through a batch.
func TestLeaveAgainWritesNothing(t *testing.T) {
	s := openMem(t)
	mustOK(t)(s.Leave(1, 100))
	mustOK(t)(s.Rejoin(1, 200))
	mustOK(t)(s.Leave(1, 300))
	mustOK(t)(s.Rejoin(1, 400))
	before := dump(t, s)
	// Each closed episode's leave again is a duplicate and writes nothing.
	for _, at := range []uint64{100, 300} {
		if c := mustOK(t)(s.Leave(1, at)); c.Changed || !c.Duplicate || c.Closed != nil || !reflect.DeepEqual(c.Before, c.After) {
			t.Fatalf("Leave(1, %d) again: %+v", at, c)
		}
		b := s.NewBatch()
		if c := mustOK(t)(b.Leave(1, at)); c.Changed || !c.Duplicate || !b.pb.Empty() || b.Len() != 1 {
			t.Fatalf("batch Leave(1, %d) again: %+v, staged %d bytes", at, c, b.pb.Len())
		}
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}
	}
	if after := dump(t, s); after != before {
		t.Fatalf("leaves again changed the store\nbefore:\n%s\nafter:\n%s", before, after)
	}
}

func TestFailedCommandWritesNothing(t *testing.T) {
	s := openMem(t)
	mustOK(t)(s.Leave(1, 100))
	before := dump(t, s)
	b := s.NewBatch()
	defer b.Close()
	for _, c := range []Command{
		{Op: OpRejoin, UserID: 1, AtNs: OpenEnd},
		{Op: Op(9), UserID: 1, AtNs: 5},
	} {
		if _, err := b.Apply(c); !errors.Is(err, ErrInvalid) {
			t.Fatalf("Apply(%+v): err = %v, want ErrInvalid", c, err)
		}
	}
	if b.Len() != 0 || !b.pb.Empty() {
		t.Fatalf("failed command staged something: Len %d", b.Len())
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	if after := dump(t, s); after != before {
		t.Fatalf("store changed:\n%s\n%s", before, after)
	}
}

// TestRefusedRejoinIsRemembered: a rejoin before the open boundary changes
// no state, names what was wrong, and records only its identity, so that
// delivered again it is refused again, as a duplicate, whatever changed
// since: a retry must not read as "applied before".
func TestRefusedRejoinIsRemembered(t *testing.T) {
	s := openMem(t)
	mustOK(t)(s.Leave(1, 100))
	before := dump(t, s)
	_, err := s.Rejoin(1, 99)
	if !errors.Is(err, ErrRejoinBeforeLeave) {
		t.Fatalf("err = %v", err)
	} else if msg := err.Error(); !strings.Contains(msg, "user 1") || !strings.Contains(msg, "left_at 100") || !strings.Contains(msg, "at 99") {
		t.Fatalf("error does not name user, left_at and at: %q", msg)
	}
	if d := newLines(before, dump(t, s)); len(d) != 1 || !strings.HasPrefix(d[0], "05") {
		t.Fatalf("refused rejoin wrote %q, want one identity record", d)
	}
	c, err := s.Rejoin(1, 99)
	if !errors.Is(err, ErrRejoinBeforeLeave) || !c.Duplicate || c.Changed {
		t.Fatalf("refused rejoin again = %+v, %v; want a duplicate refused again", c, err)
	}
	mustOK(t)(s.Leave(1, 50)) // left_at moves before the refused rejoin
	if c, err := s.Rejoin(1, 99); !errors.Is(err, ErrRejoinBeforeLeave) || c.Changed {
		t.Fatalf("refused rejoin after left_at moved = %+v, %v; want refused again", c, err)
	}
}

// newLines returns the lines of after that are not in before.
func newLines(before, after string) []string {
	old := make(map[string]bool)
	for _, l := range strings.Split(before, "\n") {
		old[l] = true
	}
	var out []string
	for _, l := range strings.Split(after, "\n") {
		if !old[l] {
			out = append(out, l)
		}
	}
	return out
}

func TestBatchDiscardedOnClose(t *testing.T) {
	s := openMem(t)
	before := dump(t, s)
	b := s.NewBatch()
	mustOK(t)(b.Leave(1, 100))
	if err := b.SetCheckpoint("c", 0, 5); err != nil {
		t.Fatal(err)
	}
	if err := b.RecordLateLeave(1, LateLeave{LeftAtNs: 100, ForwardedThroughNs: 100}); err != nil {
		t.Fatal(err)
	}
	if err := b.SetNote(1, []byte("x")); err != nil {
		t.Fatal(err)
	}
	if _, err := b.AddOutbox([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := b.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if after := dump(t, s); after != before {
		t.Fatalf("closed batch wrote:\n%s", after)
	}
	if _, err := b.Leave(2, 1); !errors.Is(err, ErrBatchDone) {
		t.Fatalf("Leave after Close: %v", err)
	}
	if err := b.Commit(); !errors.Is(err, ErrBatchDone) {
		t.Fatalf("Commit after Close: %v", err)
	}
	if err := b.SetCheckpoint("c", 0, 5); !errors.Is(err, ErrBatchDone) {
		t.Fatalf("SetCheckpoint after Close: %v", err)
	}
	for name, err := range map[string]error{
		"RecordLateLeave": b.RecordLateLeave(1, LateLeave{LeftAtNs: 100, ForwardedThroughNs: 100}),
		"SetNote":         b.SetNote(1, []byte("x")),
		"Member":          second(b.Member(1)),
		"AddOutbox":       second(b.AddOutbox([]byte("x"))),
	} {
		if !errors.Is(err, ErrBatchDone) {
			t.Fatalf("%s after Close: %v", name, err)
		}
	}
	// The claim on user 1 was released.
	mustOK(t)(s.Leave(1, 100))
}

func TestConflict(t *testing.T) {
	s := openMem(t)
	a, b := s.NewBatch(), s.NewBatch()
	defer a.Close()
	defer b.Close()
	mustOK(t)(a.Leave(1, 100))
	if _, err := b.Leave(1, 50); !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "user 1") {
		t.Fatalf("second batch on user 1: %v", err)
	}
	if _, err := s.Rejoin(1, 200); !errors.Is(err, ErrConflict) {
		t.Fatalf("Store.Rejoin on claimed user: %v", err)
	}
	mustOK(t)(b.Leave(2, 50)) // other users are free
	mustOK(t)(a.Rejoin(1, 200))
	if err := a.Commit(); err != nil {
		t.Fatal(err)
	}
	// After a's commit, b may take user 1 and sees a's writes.
	c := mustOK(t)(b.Leave(1, 150))
	if c.After.LeftAtNs != 200 || len(c.Before.History) != 1 {
		t.Fatalf("b did not see a's commit: %+v", c)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	if len(s.claims.owner) != 0 {
		t.Fatalf("claims left: %v", s.claims.owner)
	}
}

// TestConcurrentSameUser races Store.Leave and Store.Rejoin on one user from
// many goroutines: every call must either apply atomically or fail with
// ErrConflict, so the result is a valid member whose history accounts for
// every successful rejoin.
func TestConcurrentSameUser(t *testing.T) {
	s := openMem(t)
	const goroutines, calls = 4, 50
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		rejoins int
	)
	for g := range goroutines {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range calls {
				at := uint64(g*calls+i) + 1
				var c Change
				var err error
				if i%2 == 0 {
					c, err = s.Leave(1, at)
				} else {
					c, err = s.Rejoin(1, at+1_000_000)
				}
				switch {
				case err == nil:
					if c.Closed != nil {
						mu.Lock()
						rejoins++
						mu.Unlock()
					}
				case errors.Is(err, ErrConflict), errors.Is(err, ErrRejoinBeforeLeave):
				default:
					t.Error(err)
					return
				}
			}
		}()
	}
	wg.Wait()
	m, err := s.Member(1)
	if err != nil {
		t.Fatal(err)
	}
	if len(m.History) != rejoins {
		t.Fatalf("history has %d episodes, %d rejoins succeeded", len(m.History), rejoins)
	}
}

// TestConcurrentPartitions is the intended pattern: one batch at a time per
// worker, each worker with its own users. Run with -race.
func TestConcurrentPartitions(t *testing.T) {
	s := openMem(t)
	const workers, users, rounds = 4, 20, 10
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := range rounds {
				b := s.NewBatch()
				for u := range users {
					user := uint64(u*workers + w)
					at := uint64(r*100 + 1)
					if _, err := b.Leave(user, at); err != nil {
						t.Error(err)
					}
					if _, err := b.Rejoin(user, at+50); err != nil {
						t.Error(err)
					}
				}
				if err := b.SetCheckpoint("commands", int32(w), int64(r+1)); err != nil {
					t.Error(err)
				}
				if err := b.Commit(); err != nil {
					t.Error(err)
				}
				b.Close()
				if _, err := s.Status(uint64(w)); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	cps, err := s.Checkpoints("commands")
	if err != nil {
		t.Fatal(err)
	}
	if want := map[int32]int64{0: rounds, 1: rounds, 2: rounds, 3: rounds}; !reflect.DeepEqual(cps, want) {
		t.Fatalf("Checkpoints = %v, want %v", cps, want)
	}
	st, err := s.Restore(context.Background(), func(m Member) error {
		if len(m.History) != rounds || m.Status != Active {
			return fmt.Errorf("user %d: %+v", m.UserID, m)
		}
		return nil
	})
	if err != nil || st.Members != workers*users || st.Episodes != workers*users*rounds {
		t.Fatalf("Restore = %+v, %v", st, err)
	}
}

func TestCheckpoints(t *testing.T) {
	s := openMem(t)
	if _, ok, err := s.Checkpoint("a", 0); ok || err != nil {
		t.Fatalf("Checkpoint of empty store: %v, %v", ok, err)
	}
	if m, err := s.Checkpoints("a"); err != nil || m == nil || len(m) != 0 {
		t.Fatalf("Checkpoints of empty store: %v, %v", m, err)
	}
	b := s.NewBatch()
	defer b.Close()
	for _, cp := range []struct {
		topic string
		p     int32
		next  int64
	}{
		{"a", 0, 10}, {"a", 1, 11}, {"a", 1 << 30, 12},
		// Topics that extend "a" must not show up among its checkpoints.
		{"ab", 0, 20}, {"a.b", 0, 30}, {"a\x01", 0, 40},
		{"a", 0, 13}, // the last write wins
	} {
		if err := b.SetCheckpoint(cp.topic, cp.p, cp.next); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	if next, ok, err := s.Checkpoint("a", 0); next != 13 || !ok || err != nil {
		t.Fatalf("Checkpoint(a, 0) = %d, %v, %v", next, ok, err)
	}
	got, err := s.Checkpoints("a")
	if want := map[int32]int64{0: 13, 1: 11, 1 << 30: 12}; err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("Checkpoints(a) = %v, %v; want %v", got, err, want)
	}
	got, err = s.Checkpoints("ab")
	if want := map[int32]int64{0: 20}; err != nil || !reflect.DeepEqual(got, want) {
		t.Fatalf("Checkpoints(ab) = %v, %v; want %v", got, err, want)
	}
}

func TestCheckpointInvalid(t *testing.T) {
	s := openMem(t)
	b := s.NewBatch()
	defer b.Close()
	for _, tc := range []struct {
		topic string
		p     int32
		next  int64
	}{{"", 0, 0}, {"a\x00b", 0, 0}, {"a", -1, 0}, {"a", 0, -1}} {
		if err := b.SetCheckpoint(tc.topic, tc.p, tc.next); !errors.Is(err, ErrInvalid) {
			t.Errorf("SetCheckpoint(%q, %d, %d) = %v, want ErrInvalid", tc.topic, tc.p, tc.next, err)
		}
		if tc.next == 0 {
			if _, _, err := s.Checkpoint(tc.topic, tc.p); !errors.Is(err, ErrInvalid) {
				t.Errorf("Checkpoint(%q, %d) = %v, want ErrInvalid", tc.topic, tc.p, err)
			}
		}
	}
	if _, err := s.Checkpoints("x\x00"); !errors.Is(err, ErrInvalid) {
		t.Errorf("Checkpoints with 0x00: %v", err)
	}
}

func TestFormatVersion(t *testing.T) {
	fs := vfs.NewMem()
	s, err := Open("db", &Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	mustOK(t)(s.Leave(1, 1))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Reopening a store of this version works and keeps its records.
	s, err = Open("db", &Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	if st, err := s.Status(1); err != nil || st.Status != Left {
		t.Fatalf("Status after reopen = %+v, %v", st, err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// Version 1 (no identities) and a future version are refused, naming the
	// way out.
	for _, other := range []uint32{1, formatVersion + 1} {
		dir := fmt.Sprintf("v%d", other)
		s, err := Open(dir, &Options{FS: fs})
		if err != nil {
			t.Fatal(err)
		}
		v := encodeFormat(other)
		if err := s.db.Set(metaFormatKey, v[:], pebble.Sync); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		_, err = Open(dir, &Options{FS: fs})
		if !errors.Is(err, ErrUnknownFormat) || !strings.Contains(err.Error(), fmt.Sprintf("format version %d", other)) ||
			!strings.Contains(err.Error(), "rebuilt from the commands topic") {
			t.Fatalf("Open of version %d: %v", other, err)
		}
	}

	// A Pebble store with records but no stamp is not ours.
	db, err := pebble.Open("foreign", &pebble.Options{FS: fs, Logger: pebbleLogger{l: slog.New(slog.DiscardHandler)}})
	if err != nil {
		t.Fatal(err)
	}
	if err := db.Set([]byte("hello"), []byte("world"), pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := Open("foreign", &Options{FS: fs}); !errors.Is(err, ErrUnknownFormat) || !strings.Contains(err.Error(), "68656c6c6f") {
		t.Fatalf("Open of foreign store: %v", err)
	}
}

// TestCorruptRecords plants bad records and checks that every read path
// reports ErrCorrupt naming the key.
func TestCorruptRecords(t *testing.T) {
	for _, tc := range []struct {
		name       string
		key, value []byte
		user       uint64
	}{
		{"short state", appendStateKey(nil, 5), []byte{1, 2, 3}, 5},
		{"long state", appendStateKey(nil, 5), make([]byte, 10), 5},
		{"unknown status", appendStateKey(nil, 5), []byte{2, 0, 0, 0, 0, 0, 0, 0, 0}, 5},
		{"active with left_at", appendStateKey(nil, 5), []byte{0, 1, 0, 0, 0, 0, 0, 0, 0}, 5},
		{"active without history", appendStateKey(nil, 5), []byte{0, 0, 0, 0, 0, 0, 0, 0, 0}, 5},
		{"history without state", appendHistoryKey(nil, 5, 10), []byte{20, 0, 0, 0, 0, 0, 0, 0}, 5},
		{"unknown tag", []byte{1, 0, 0, 0, 0, 0, 0, 0, 5, 0x14}, []byte{1, 0, 0, 0, 0, 0, 0, 0, 0}, 5},
		{"late-leave key without suffix", appendUserKey(nil, 5, TagLateLeave), []byte{20, 0, 0, 0, 0, 0, 0, 0}, 5},
		{"short late-leave value", appendLateLeaveKey(nil, 6, 10), []byte{20, 0, 0}, 6},
		{"late leave through before left", appendLateLeaveKey(nil, 6, 10), []byte{9, 0, 0, 0, 0, 0, 0, 0}, 6},
		{"late leave at no episode", appendLateLeaveKey(nil, 6, 11), []byte{20, 0, 0, 0, 0, 0, 0, 0}, 6},
		{"late leave without state", appendLateLeaveKey(nil, 5, 10), []byte{20, 0, 0, 0, 0, 0, 0, 0}, 5},
		{"note key with suffix", append(appendNoteKey(nil, 6), 0), []byte("x"), 6},
		{"empty note", appendNoteKey(nil, 6), nil, 6},
		{"long note", appendNoteKey(nil, 6), make([]byte, MaxNoteLen+1), 6},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := openMem(t)
			// User 6 left at 10 and has a valid note, so that the record
			// under test is the only thing wrong with it.
			mustOK(t)(s.Leave(6, 10))
			nb := s.NewBatch()
			if err := nb.SetNote(6, []byte("ok")); err != nil {
				t.Fatal(err)
			}
			if err := nb.Commit(); err != nil {
				t.Fatal(err)
			}
			if err := s.db.Set(tc.key, tc.value, pebble.Sync); err != nil {
				t.Fatal(err)
			}
			hexKey := fmt.Sprintf("%x", tc.key)
			check := func(what string, err error) {
				t.Helper()
				var ce *CorruptError
				if !errors.Is(err, ErrCorrupt) || !errors.As(err, &ce) {
					t.Fatalf("%s: err = %v, want ErrCorrupt", what, err)
				}
				if !strings.Contains(err.Error(), hexKey) && !strings.Contains(err.Error(), fmt.Sprintf("%x", appendStateKey(nil, tc.user))) {
					t.Fatalf("%s: error %q does not name key %s", what, err, hexKey)
				}
			}
			_, err := s.Restore(context.Background(), func(Member) error { return nil })
			check("Restore", err)
			if bytes.Equal(tc.key[:9], appendStateKey(nil, tc.user)[:9]) && tc.key[9] >= TagCommunityLeave && tc.key[9] <= TagNote {
				_, err = s.Member(tc.user)
				check("Member", err)
				_, err = s.Leave(tc.user, 1)
				check("Leave", err)
				b := s.NewBatch()
				defer b.Close()
				_, err = b.Member(tc.user)
				check("Batch.Member", err)
				check("RecordLateLeave", b.RecordLateLeave(tc.user, LateLeave{LeftAtNs: 10, ForwardedThroughNs: 10}))
			}
		})
	}
	// Record-level corruption is also caught by Status, which reads only
	// the current-state record.
	s := openMem(t)
	if err := s.db.Set(appendStateKey(nil, 5), []byte{7}, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Status(5); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "01000000000000000511") {
		t.Fatalf("Status: %v", err)
	}
	if err := s.db.Set(appendCheckpointKey(nil, "t", 1), []byte{7}, pebble.Sync); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Checkpoint("t", 1); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Checkpoint: %v", err)
	}
	if _, err := s.Checkpoints("t"); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("Checkpoints: %v", err)
	}
}

func TestClosed(t *testing.T) {
	s, err := Open("db", &Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	b := s.NewBatch()
	mustOK(t)(b.Leave(1, 1))
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for name, err := range map[string]error{
		"Close":        s.Close(),
		"Leave":        second(s.Leave(1, 1)),
		"Rejoin":       second(s.Rejoin(1, 2)),
		"Status":       second(s.Status(1)),
		"History":      second(s.History(1)),
		"Member":       second(s.Member(1)),
		"Checkpoints":  second(s.Checkpoints("t")),
		"Restore":      second(s.Restore(context.Background(), func(Member) error { return nil })),
		"Outbox":       s.Outbox(func(uint64, []byte) error { return nil }),
		"DeleteOutbox": s.DeleteOutbox(1),
	} {
		if !errors.Is(err, ErrClosed) {
			t.Errorf("%s after Close: %v, want ErrClosed", name, err)
		}
	}
	if _, _, err := s.Checkpoint("t", 0); !errors.Is(err, ErrClosed) {
		t.Errorf("Checkpoint after Close: %v", err)
	}
}

func second[T any](_ T, err error) error { return err }

func TestOptions(t *testing.T) {
	if err := (&Options{CacheSize: -1}).EnsureDefaults().Validate(); !errors.Is(err, ErrInvalid) {
		t.Fatalf("negative CacheSize: %v", err)
	}
	if err := (&Options{}).Validate(); !errors.Is(err, ErrInvalid) {
		t.Fatalf("undefaulted: %v", err)
	}
	o := (*Options)(nil).EnsureDefaults()
	if o.FS != vfs.Default || o.Logger == nil || o.CacheSize != DefaultCacheSize || o.NoSync {
		t.Fatalf("defaults: %+v", o)
	}
	if _, err := Open("db", &Options{FS: vfs.NewMem(), CacheSize: -1}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Open with bad options: %v", err)
	}
	// Open copies its options and leaves the caller's alone.
	in := &Options{FS: vfs.NewMem()}
	s, err := Open("db", in)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if in.Logger != nil || in.CacheSize != 0 {
		t.Fatalf("Open modified its options: %+v", in)
	}
}

// TestLogger checks that Pebble's log lines reach the configured logger
// (and so, by default, nowhere), its informational ones at debug level.
func TestLogger(t *testing.T) {
	var buf bytes.Buffer
	var mu sync.Mutex
	h := slog.NewTextHandler(&lockedWriter{w: &buf, mu: &mu}, &slog.HandlerOptions{Level: slog.LevelDebug})
	fs := vfs.NewMem()
	for range 2 { // the second open replays the first one's WAL and logs it
		s := openFS(t, fs, &Options{Logger: slog.New(h)})
		mustOK(t)(s.Leave(1, 1))
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if !strings.Contains(buf.String(), "level=DEBUG") || !strings.Contains(buf.String(), "component=pebble") {
		t.Fatalf("no Pebble debug lines reached the logger:\n%s", buf.String())
	}
	if strings.Contains(buf.String(), "level=INFO") {
		t.Fatalf("Pebble logged at info:\n%s", buf.String())
	}
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// TestTempDirEmptiedAtOpen: what a caller left in the store's temporary
// directory (a restore's spill files, when the process died) is gone
// when the store opens again, in memory and on disk (where Pebble meets
// the directory among its files); the store's own data is not.
func TestTempDirEmptiedAtOpen(t *testing.T) {
	t.Run("mem", func(t *testing.T) { testTempDirEmptiedAtOpen(t, vfs.NewMem(), "db") })
	t.Run("disk", func(t *testing.T) { testTempDirEmptiedAtOpen(t, vfs.Default, t.TempDir()) })
}

func testTempDirEmptiedAtOpen(t *testing.T, fs vfs.FS, dir string) {
	s, err := Open(dir, &Options{FS: fs, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Leave(7, 100); err != nil {
		t.Fatal(err)
	}
	spill := s.FS().PathJoin(s.TempDir(), "restore-0-1")
	if err := fs.MkdirAll(spill, 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := fs.Create(fs.PathJoin(spill, "run-1"), vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("spilled")); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = Open(dir, &Options{FS: fs, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := fs.Stat(s.TempDir()); err == nil {
		t.Fatalf("%s still there after the store opened again", s.TempDir())
	}
	if m, err := s.Member(7); err != nil || m.Status != Left {
		t.Fatalf("user 7 after the reopen: %+v, %v", m, err)
	}
}
