package fanout

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/pkg/membership"
)

// spillFS is a store's file system that counts the spill files created
// per partition (their directory is restore-<partition>-<n>) and fails
// their writes while failWrites is set.
type spillFS struct {
	mem *vfs.MemFS
	fs  vfs.FS

	mu         sync.Mutex
	created    map[string]int // by the partition's directory prefix
	failWrites bool
}

var errSpillInjected = errors.New("injected: no space left on device")

func newSpillFS() *spillFS {
	f := &spillFS{mem: vfs.NewMem(), created: make(map[string]int)}
	f.fs = errorfs.Wrap(f.mem, errorfs.InjectorFunc(func(op errorfs.Op) error {
		i := strings.Index(op.Path, "/temp/restore-")
		if i < 0 {
			return nil
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		switch op.Kind {
		case errorfs.OpCreate:
			dir, _, _ := strings.Cut(op.Path[i+len("/temp/"):], "/")
			f.created[dir[:strings.LastIndexByte(dir, '-')]]++ // restore-<partition>
		case errorfs.OpFileWrite:
			if f.failWrites {
				return errSpillInjected
			}
		}
		return nil
	}))
	return f
}

func (f *spillFS) spills(part string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.created["restore-"+part]
}

// left lists what the store's temporary directory holds.
func (f *spillFS) left(t *testing.T) []string {
	t.Helper()
	ls, err := f.mem.List("db/temp")
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return ls
}

// interleaved returns recs as a read of ways changelog partitions gets
// them: each record on a partition of its own at random (so that a
// user's records lie on several), and the partitions' records fetched in
// turns of a few, so that a user's records come out of the order of the
// commands they follow.
func interleaved(rng *rand.Rand, recs []*kgo.Record, ways int) []*kgo.Record {
	parts := make([][]*kgo.Record, ways)
	for _, r := range recs {
		p := rng.IntN(ways)
		parts[p] = append(parts[p], r)
	}
	var out []*kgo.Record
	for len(out) < len(recs) {
		for p := range parts {
			n := min(len(parts[p]), 1+rng.IntN(5))
			out = append(out, parts[p][:n]...)
			parts[p] = parts[p][n:]
		}
	}
	return out
}

// TestRestoreSpilledEqualsReplay: restores side by side whose headers
// are bounded to a few KiB spill each many times, to more files than a
// merge reads at once (which says how far it is), from changelogs read
// from several partitions (users' records on more than one, out of
// order), and end with the replay's bytes, their spill files removed.
//
// Then the failures: a spill whose write fails halts the restores (a
// storage failure) with nothing of them in the store and no spill file
// left; restores cancelled in the middle of their reads, after they
// spilled, or at the end of the merge of their spill files, leave none
// either. An owner started again on the same store restores
// them all and ends with the replay's bytes.
func TestRestoreSpilledEqualsReplay(t *testing.T) {
	const parts = 4
	users := usersOf(parts, 70)
	recs := make(map[int32][]*kgo.Record)
	tails := make(map[int32]int)
	ends := make(map[int32]int64)
	changelogs := make(map[int32]*fakeChangelog)
	want := make(map[uint64][]byte)
	for p := range int32(parts) {
		rng := rand.New(rand.NewPCG(26, uint64(p)))
		recs[p], tails[p] = handoverCommandsOf(rng, p, users[p])
		ends[p] = int64(len(recs[p]))
		beyond := tails[p] + 3

		first := newHandoverRunOf(t, &fakeChangelog{}, parts, nil)
		first.claimOf(p, 0)
		written := first.applyAll(t, map[int32][]*kgo.Record{p: recs[p][:beyond]}, map[int32]int64{p: int64(beyond)})
		changelogs[p] = &fakeChangelog{recs: interleaved(rng, written, 3)}

		replay := newHandoverRunOf(t, changelogs[p], parts, func(c *Config) { c.Testing.HandoverReplay = true })
		replay.claimOf(p, int64(tails[p]))
		replay.applyAll(t, map[int32][]*kgo.Record{p: recs[p]}, map[int32]int64{p: ends[p]})
		for u, d := range replay.exported(t) {
			want[u] = d
		}
	}
	open := func(fs *spillFS) *membership.Store {
		t.Helper()
		store, err := membership.Open("db", &membership.Options{FS: fs.fs, NoSync: true})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { store.Close() })
		return store
	}
	const limit = 1 << 10 // a few records a file, the smallest chunk and run held

	t.Run("spilled", func(t *testing.T) {
		fs := newSpillFS()
		run := newHandoverRunOn(t, open(fs), newSideBySideChangelog(changelogs, parts, nil), parts,
			func(c *Config) { c.RestoreParallel = parts })
		run.a.handover.spillLimit = limit
		var mu sync.Mutex
		merged := make(map[int32]RestoreProgressInfo)
		run.a.handover.ev.RestoreProgress = func(i RestoreProgressInfo) {
			mu.Lock()
			defer mu.Unlock()
			if i.Phase == phaseMerge {
				merged[i.Partition] = i
			}
		}
		for p := range int32(parts) {
			run.claimOf(p, int64(tails[p]))
		}
		run.applyAll(t, recs, ends)
		for p := range int32(parts) {
			// The merge's last report: entries read, at most the total
			// (a merge keeps one entry of a user's).
			if i, ok := merged[p]; !ok || i.Records == 0 || i.Records > i.RecordsTotal {
				t.Errorf("partition %d: last progress of the merge %+v, want entries read of the total", p, i)
			}
		}
		if len(run.handovers) != parts {
			t.Fatalf("handovers %+v, want %d", run.handovers, parts)
		}
		for _, h := range run.handovers {
			if h.Source != "changelog" {
				t.Fatalf("partition %d: %v", h.Partition, h)
			}
		}
		for p := range parts {
			n := fs.spills(string(rune('0' + p)))
			t.Logf("partition %d: %d spill files", p, n)
			if n <= spillFanIn {
				t.Errorf("partition %d: %d spill files, want more than a merge reads at once (%d)", p, n, spillFanIn)
			}
		}
		if diff := diffStores(run.exported(t), want); diff != "" {
			t.Fatalf("restored store differs from the replays':\n%s", diff)
		}
		if left := fs.left(t); len(left) > 0 {
			t.Fatalf("spill files left after the restores: %v", left)
		}
	})

	// Bounded by the budget alone: restores take more than their
	// estimate while it has room, and spill when it has none; either
	// way they give every byte back.
	for _, tc := range []struct {
		name   string
		budget int64
		spills bool
	}{
		{"budget with room", 1 << 30, false},
		{"budget full", 64 << 10, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := newSpillFS()
			run := newHandoverRunOn(t, open(fs), newSideBySideChangelog(changelogs, 1, nil), parts,
				func(c *Config) { c.RestoreParallel = parts })
			budget := newMemBudget(tc.budget)
			run.a.handover.budget = budget
			for p := range int32(parts) {
				run.claimOf(p, int64(tails[p]))
			}
			run.applyAll(t, recs, ends)
			for _, h := range run.handovers {
				if h.Source != "changelog" || (h.Spilled > 0) != tc.spills {
					t.Fatalf("partition %d: %v, %d bytes spilled; want spills %v", h.Partition, h, h.Spilled, tc.spills)
				}
			}
			if diff := diffStores(run.exported(t), want); diff != "" {
				t.Fatalf("restored store differs from the replays':\n%s", diff)
			}
			budget.mu.Lock()
			defer budget.mu.Unlock()
			if budget.mu.held != 0 {
				t.Fatalf("%d bytes of the budget held after the restores", budget.mu.held)
			}
		})
	}

	t.Run("failures", func(t *testing.T) {
		fs := newSpillFS()
		store := open(fs)

		// A spill that cannot be written fails the restores, which
		// import nothing.
		fs.failWrites = true
		run := newHandoverRunOn(t, store, newSideBySideChangelog(changelogs, parts, nil), parts,
			func(c *Config) { c.RestoreParallel = parts })
		run.a.handover.spillLimit = limit
		for p := range int32(parts) {
			run.claimOf(p, int64(tails[p]))
		}
		var fps []kgo.FetchTopicPartition
		for p := range int32(parts) {
			fps = append(fps, kgo.FetchTopicPartition{Topic: "membership.commands",
				FetchPartition: kgo.FetchPartition{Partition: p, HighWatermark: ends[p]}})
		}
		if err := run.a.applyFetched(context.Background(), fps); !errors.Is(err, errSpillInjected) {
			t.Fatalf("restores whose spills cannot be written: %v, want the write's error", err)
		}
		fs.mu.Lock()
		fs.failWrites = false
		fs.mu.Unlock()
		checkNothing := func(when string) {
			t.Helper()
			for p := range int32(parts) {
				if _, ok, err := store.Checkpoint("membership.commands", p); ok || err != nil {
					t.Fatalf("%s: partition %d has a checkpoint (%v)", when, p, err)
				}
			}
			n := 0
			if err := store.Export(func(uint64, []byte) error { n++; return nil }); err != nil || n > 0 {
				t.Fatalf("%s: the store holds %d users (%v)", when, n, err)
			}
			if left := fs.left(t); len(left) > 0 {
				t.Fatalf("%s: spill files left: %v", when, left)
			}
		}
		checkNothing("after the failed spill")

		// Cancelled half-way through every read, after spills.
		crash := map[int32]bool{0: true, 1: true, 2: true, 3: true}
		src := newSideBySideChangelog(changelogs, parts, crash)
		cut := newHandoverRunOn(t, store, src, parts, func(c *Config) { c.RestoreParallel = parts })
		cut.a.handover.spillLimit = limit
		for p := range int32(parts) {
			cut.claimOf(p, int64(tails[p]))
		}
		before := fs.spills("0")
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- cut.a.applyFetched(ctx, fps) }()
		waitFor(t, "every read half-way through", func() bool {
			src.mu.Lock()
			defer src.mu.Unlock()
			return len(src.seen) == parts
		})
		if fs.spills("0") == before {
			t.Fatal("no spill before the cut")
		}
		cancel()
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
		checkNothing("after the cancelled restores")

		// Cancelled when the merge of its spill files ends, before its
		// users are written: one restore at a time, so that none
		// imported before.
		merging := newHandoverRunOn(t, store, newSideBySideChangelog(changelogs, 1, nil), parts,
			func(c *Config) { c.RestoreParallel = 1 })
		merging.a.handover.spillLimit = limit
		for p := range int32(parts) {
			merging.claimOf(p, int64(tails[p]))
		}
		mctx, mcancel := context.WithCancel(context.Background())
		defer mcancel()
		var mergedOnce sync.Once
		merged := false
		merging.a.handover.ev.RestoreProgress = func(i RestoreProgressInfo) {
			if i.Phase == phaseMerge {
				mergedOnce.Do(func() { merged = true; mcancel() })
			}
		}
		if err := merging.a.applyFetched(mctx, fps); err != nil && !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
		if !merged {
			t.Fatal("no restore merged its spill files")
		}
		checkNothing("after a restore cancelled at the end of its merge")

		again := newHandoverRunOn(t, store, newSideBySideChangelog(changelogs, parts, nil), parts,
			func(c *Config) { c.RestoreParallel = parts })
		again.a.handover.spillLimit = limit
		for p := range int32(parts) {
			again.claimOf(p, int64(tails[p]))
		}
		again.applyAll(t, recs, ends)
		if len(again.handovers) != parts {
			t.Fatalf("handovers after the restart %+v, want %d", again.handovers, parts)
		}
		for _, h := range again.handovers {
			if h.Source != "changelog" {
				t.Fatalf("partition %d: %v", h.Partition, h)
			}
		}
		if diff := diffStores(again.exported(t), want); diff != "" {
			t.Fatalf("store after the failures and the restart differs from the replays':\n%s", diff)
		}
		if left := fs.left(t); len(left) > 0 {
			t.Fatalf("spill files left after the restores: %v", left)
		}
	})
}

// TestRestoreHeadersTakeMore: headers held beyond the limit take more of
// the budget while it gives it, each time what the next chunk or run
// needs, and spill only once it does not.
func TestRestoreHeadersTakeMore(t *testing.T) {
	const allowed = 256 << 10
	var taken int64
	hs := newRestoreHeaders(spillTo{limit: 16 << 10, fs: vfs.NewMem(), dir: "temp", more: func(n int64) bool {
		if taken+n > allowed {
			return false
		}
		taken += n
		return true
	}})
	defer hs.done()
	h := make([]byte, 300)
	for i := range 2000 {
		hs.add(uint64(i), h, true, restoreOrder{parts: 1, offset: int64(i)})
		if hs.spill.n > 0 && taken+int64(hs.chunkLen) <= allowed && taken+int64(hs.runLen)*headerRefBytes <= allowed {
			t.Fatalf("record %d: spilled with %d bytes still to take", i, allowed-taken)
		}
		if hs.held > 16<<10+taken {
			t.Fatalf("record %d: %d bytes held, %d taken beyond the limit", i, hs.held, taken)
		}
	}
	if taken == 0 || hs.spill.n == 0 {
		t.Fatalf("%d bytes taken, %d spills; want both", taken, hs.spill.n)
	}
}
