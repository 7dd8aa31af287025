package fanout

import (
	"bytes"
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/cohortgate/cohortgate/pkg/gate"
	"github.com/cohortgate/cohortgate/pkg/membership"
)

const snapTopic = "cmds"

// snapshotStore is a store with leaves and rejoins of users 1 to n over
// partitions 0 and 1 of snapTopic, with their checkpoints.
func snapshotStore(t *testing.T, n uint64) *membership.Store {
	t.Helper()
	store, err := membership.Open("", &membership.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	b := store.NewBatch()
	for u := uint64(1); u <= n; u++ {
		ops := []membership.Op{membership.OpLeave}
		switch u % 5 {
		case 0:
			ops = append(ops, membership.OpRejoin, membership.OpLeave)
		case 2:
			ops = append(ops, membership.OpRejoin)
		case 4:
			ops = append(ops, membership.OpRejoin, membership.OpLeave, membership.OpRejoin)
		}
		for i, op := range ops {
			if _, err := b.Apply(membership.Command{Op: op, UserID: u, AtNs: u*1000 + uint64(i)*100}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for p, next := range map[int32]int64{0: 40, 1: 77} {
		if err := b.SetCheckpoint(snapTopic, p, next); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	return store
}

// sameDecisions fails unless a and b decide alike for users 0 to n+1 at
// every boundary of their episodes and around it.
func sameDecisions(t *testing.T, a, b *gate.Map, n uint64) {
	t.Helper()
	if a.Len() != b.Len() {
		t.Fatalf("gates hold %d and %d users", a.Len(), b.Len())
	}
	for u := uint64(0); u <= n+1; u++ {
		ea, eb := a.Episodes(u, nil), b.Episodes(u, nil)
		if !slices.Equal(ea, eb) {
			t.Fatalf("user %d: episodes %v and %v", u, ea, eb)
		}
		for _, e := range ea {
			for _, ts := range []uint64{e.LeftAtNs - 1, e.LeftAtNs, e.RejoinedAtNs - 1, e.RejoinedAtNs} {
				if a.Allows(u, ts) != b.Allows(u, ts) {
					t.Fatalf("user %d at %d: the gates decide apart", u, ts)
				}
			}
		}
	}
}

// TestSnapshotRestore: a snapshot that reflects the store is loaded, and
// one that is missing, corrupt, truncated, of another version, of another
// topic or stale is not: the gate is scanned instead, and is the same.
func TestSnapshotRestore(t *testing.T) {
	const n = 2*restoreChunk + 9
	ctx := context.Background()
	store := snapshotStore(t, n)
	scanned := gate.New()
	if _, err := restoreGate(ctx, store, scanned, gateSnapshot{}, nil); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	snap := gateSnapshot{path: filepath.Join(dir, "gate.snapshot"), topic: snapTopic}
	// What a save killed halfway leaves behind.
	if err := os.WriteFile(filepath.Join(dir, "gate.snapshot.tmp-123"), []byte("torn"), 0o644); err != nil {
		t.Fatal(err)
	}
	info, err := snap.save(store, scanned, nil)
	if err != nil {
		t.Fatal(err)
	}
	if info.Members != scanned.Len() || info.Bytes == 0 {
		t.Fatalf("saved %+v", info)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, "*.tmp-*")); len(left) > 0 {
		t.Fatalf("temporary files left: %v", left)
	}
	good, err := os.ReadFile(snap.path)
	if err != nil {
		t.Fatal(err)
	}

	restore := func(t *testing.T, s gateSnapshot) (*gate.Map, RestoredInfo) {
		t.Helper()
		g := gate.New()
		info, err := restoreGate(ctx, store, g, s, nil)
		if err != nil {
			t.Fatal(err)
		}
		sameDecisions(t, g, scanned, n)
		return g, info
	}
	t.Run("reflects the store", func(t *testing.T) {
		_, info := restore(t, snap)
		if info.Source != "snapshot" || info.Fallback != nil {
			t.Fatalf("restored %+v, want from the snapshot", info)
		}
	})

	for _, tc := range []struct {
		name   string
		change func(b []byte) []byte
		why    string
	}{
		{"missing", nil, "no snapshot"},
		{"a byte flipped in the body", func(b []byte) []byte { b[len(b)/2] ^= 0x40; return b }, "body checksum"},
		{"a byte flipped in the label", func(b []byte) []byte { b[70] ^= 1; return b }, "header checksum"},
		{"truncated", func(b []byte) []byte { return b[:len(b)-100] }, "bytes, the header describes"},
		{"empty", func(b []byte) []byte { return nil }, "truncated in the header"},
		{"another version", func(b []byte) []byte { b[8] = 9; return b }, "version 9"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := gateSnapshot{path: filepath.Join(t.TempDir(), "gate.snapshot"), topic: snapTopic}
			if tc.change != nil {
				if err := os.WriteFile(s.path, tc.change(bytes.Clone(good)), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			_, info := restore(t, s)
			if info.Source != "scan" || info.Fallback == nil || !strings.Contains(info.Fallback.Error(), tc.why) {
				t.Fatalf("restored from the %s, fallback %v; want the scan because of %q", info.Source, info.Fallback, tc.why)
			}
			if tc.change != nil && tc.why != "no snapshot" && !errors.Is(info.Fallback, gate.ErrBadSnapshot) {
				t.Fatalf("fallback %v does not wrap gate.ErrBadSnapshot", info.Fallback)
			}
		})
	}

	t.Run("another topic", func(t *testing.T) {
		_, info := restore(t, gateSnapshot{path: snap.path, topic: "other"})
		if info.Source != "scan" || !errors.Is(info.Fallback, errStale) {
			t.Fatalf("restored %+v, want the scan, stale", info)
		}
	})

	// Last, as it changes the store: a command after the snapshot raises a
	// checkpoint, and the snapshot no longer reflects the store.
	t.Run("stale", func(t *testing.T) {
		b := store.NewBatch()
		if _, err := b.Leave(n+1, 5); err != nil {
			t.Fatal(err)
		}
		if err := b.SetCheckpoint(snapTopic, 1, 78); err != nil {
			t.Fatal(err)
		}
		if err := b.Commit(); err != nil {
			t.Fatal(err)
		}
		scanned = gate.New()
		if _, err := restoreGate(ctx, store, scanned, gateSnapshot{}, nil); err != nil {
			t.Fatal(err)
		}
		g, info := restore(t, snap)
		if info.Source != "scan" || !errors.Is(info.Fallback, errStale) ||
			!strings.Contains(info.Fallback.Error(), "partition 1 at offset 77 in the snapshot, 78 in the store") {
			t.Fatalf("restored %+v, want the scan, stale at partition 1", info)
		}
		if g.Allows(n+1, 5) {
			t.Fatal("the leave after the snapshot is not in the gate")
		}
	})

	// The same snapshot, older than the store, where a regate may bring
	// it forward: loaded, with partition 1's commands to apply again
	// from its label's offset through the store's checkpoint.
	t.Run("older, with its commands to apply again", func(t *testing.T) {
		var rg regate
		rg.set(map[int32]int64{9: 1}, map[int32]int64{9: 5}) // a previous start's, forgotten
		g := gate.New()
		info, err := restoreGate(ctx, store, g, snap, &rg)
		if err != nil {
			t.Fatal(err)
		}
		if info.Source != "snapshot" || !maps.Equal(info.Regate, map[int32]int64{1: 1}) {
			t.Fatalf("restored %+v, want from the snapshot, partition 1 owing one command", info)
		}
		if got, ok := rg.get(1); !ok || got != (regateRange{from: 77, until: 78}) || rg.pending() != 1 {
			t.Fatalf("regate of partition 1: %+v %v (%d pending), want from 77 until 78", got, ok, rg.pending())
		}
		cps := map[int32]int64{0: 40, 1: 78}
		rg.lower(cps)
		if !maps.Equal(cps, map[int32]int64{0: 40, 1: 77}) {
			t.Fatalf("a snapshot written now is labelled %v, want partition 1 at 77", cps)
		}
		rg.reached(1, 77)
		if rg.pending() != 1 {
			t.Fatal("the regate ended before its commands were applied through the store's checkpoint")
		}
		rg.reached(1, 78)
		if rg.pending() != 0 {
			t.Fatal("the regate did not end once its commands were applied")
		}
	})

	// A snapshot labelled above the store (the kill lost a batch before
	// its sync that the snapshot saw) is never used.
	t.Run("above the store", func(t *testing.T) {
		ahead := gateSnapshot{path: filepath.Join(t.TempDir(), "gate.snapshot"), topic: snapTopic}
		if _, err := ahead.save(store, scanned, func(cps map[int32]int64) { cps[0]++ }); err != nil {
			t.Fatal(err)
		}
		var rg regate
		info, err := restoreGate(ctx, store, gate.New(), ahead, &rg)
		if err != nil {
			t.Fatal(err)
		}
		if info.Source != "scan" || !errors.Is(info.Fallback, errStale) || !strings.Contains(info.Fallback.Error(), "above the store") ||
			rg.pending() != 0 {
			t.Fatalf("restored %+v (%d regates), want the scan: above the store", info, rg.pending())
		}
	})
}

func TestLabel(t *testing.T) {
	label := encodeLabel("cmds", map[int32]int64{1: 77, 0: 40})
	want := []byte{
		1,    // version
		4, 0, // topic length
		'c', 'm', 'd', 's',
		2, 0, 0, 0, // checkpoints
		0, 0, 0, 0, 40, 0, 0, 0, 0, 0, 0, 0, // partition 0 at 40
		1, 0, 0, 0, 77, 0, 0, 0, 0, 0, 0, 0, // partition 1 at 77
	}
	if !bytes.Equal(label, want) {
		t.Fatalf("label\n got % x\nwant % x", label, want)
	}
	for _, tc := range []struct {
		store map[int32]int64
		why   string
	}{
		{map[int32]int64{0: 40, 1: 77}, ""},
		{map[int32]int64{0: 40}, "the snapshot has partition 1 at offset 77, the store none"},
		{map[int32]int64{0: 40, 1: 77, 2: 0}, "the store has partition 2 at offset 0, the snapshot none"},
		{map[int32]int64{0: 41, 1: 77}, "partition 0 at offset 40 in the snapshot, 41 in the store"},
	} {
		err := matchLabel(label, "cmds", tc.store)
		if (err == nil) != (tc.why == "") || (err != nil && !strings.Contains(err.Error(), tc.why)) {
			t.Errorf("store %v: %v, want %q", tc.store, err, tc.why)
		}
	}
	for _, bad := range [][]byte{nil, {2, 0, 0}, want[:10], append(bytes.Clone(want), 0)} {
		if _, _, err := decodeLabel(bad); !errors.Is(err, errBadLabel) {
			t.Errorf("decodeLabel(% x) = %v, want errBadLabel", bad, err)
		}
	}
}
