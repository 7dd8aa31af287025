package fanout

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/cohortgate/cohortgate/pkg/gate"
)

// errCrashed is what crashFS's operations return once the crash happened.
var errCrashed = errors.New("crashed")

// crashFS is a crashable in-memory file system that takes its crash image
// at the n-th step of a snapshot save: before the temporary file is
// created, halfway through and after the write of its contents, after its
// sync, after the rename and after the directory's sync. The save then
// fails, and the image (mem.CrashClone) is what a kill or a power loss at
// that moment would have left: what was synced, and of the rest the
// share cfg says.
type crashFS struct {
	vfs.FS // the *vfs.MemFS
	mem    *vfs.MemFS
	cfg    vfs.CrashCloneCfg
	at     int // the step to crash at, from 1; 0: never

	mu    sync.Mutex
	steps []string   // the steps passed, named
	image *vfs.MemFS // once crashed
}

func newCrashFS(mem *vfs.MemFS, at int, cfg vfs.CrashCloneCfg) *crashFS {
	return &crashFS{FS: mem, mem: mem, at: at, cfg: cfg}
}

// step records a step and crashes if it is the chosen one.
func (c *crashFS) step(name string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.image != nil {
		return errCrashed
	}
	c.steps = append(c.steps, name)
	if len(c.steps) == c.at {
		c.image = c.mem.CrashClone(c.cfg)
		return fmt.Errorf("%w at %s", errCrashed, name)
	}
	return nil
}

func (c *crashFS) Create(name string, cat vfs.DiskWriteCategory) (vfs.File, error) {
	if err := c.step("create"); err != nil {
		return nil, err
	}
	f, err := c.FS.Create(name, cat)
	if err != nil {
		return nil, err
	}
	return &crashFile{File: f, fs: c}, nil
}

func (c *crashFS) Rename(from, to string) error {
	if err := c.FS.Rename(from, to); err != nil {
		return err
	}
	return c.step("renamed")
}

func (c *crashFS) OpenDir(name string) (vfs.File, error) {
	d, err := c.FS.OpenDir(name)
	if err != nil {
		return nil, err
	}
	return &crashDir{File: d, fs: c}, nil
}

type crashFile struct {
	vfs.File
	fs *crashFS
}

func (f *crashFile) Write(p []byte) (int, error) {
	half := len(p) / 2
	n, err := f.File.Write(p[:half])
	if err != nil {
		return n, err
	}
	if err := f.fs.step("half written"); err != nil {
		return n, err
	}
	m, err := f.File.Write(p[half:])
	if err != nil {
		return n + m, err
	}
	return n + m, f.fs.step("written")
}

func (f *crashFile) Sync() error {
	if err := f.File.Sync(); err != nil {
		return err
	}
	return f.fs.step("synced")
}

type crashDir struct {
	vfs.File
	fs *crashFS
}

func (d *crashDir) Sync() error {
	if err := d.File.Sync(); err != nil {
		return err
	}
	return d.fs.step("directory synced")
}

// saveSteps are crashFS's steps of one save, in order.
var saveSteps = []string{"create", "half written", "written", "synced", "renamed", "directory synced"}

// TestSnapshotSaveCrash: a kill at any step of a gate snapshot's save, with
// any share of what was not synced surviving it, leaves at the path the
// previous snapshot, whole, or the new one, whole: never a torn one, and
// never none. The new one only once its rename was made (the directory's
// sync makes it certain); the previous one, older than the store, is
// loaded with its commands to apply again. The torn temporary file is
// never loaded, and the next save removes it.
func TestSnapshotSaveCrash(t *testing.T) {
	const n = 300
	ctx := context.Background()
	store := snapshotStore(t, n) // partitions 0 at 40 and 1 at 77
	scan := func() *gate.Map {
		g := gate.New()
		if _, err := restoreGate(ctx, store, g, gateSnapshot{}, nil); err != nil {
			t.Fatal(err)
		}
		return g
	}
	before := scan()
	base := vfs.NewCrashableMem()
	if err := base.MkdirAll("/data", 0o755); err != nil {
		t.Fatal(err)
	}
	syncDirOf(t, base, "/")
	prev := gateSnapshot{path: "/data/gate.snapshot", topic: snapTopic, fs: base}
	if _, err := prev.save(store, before, nil); err != nil {
		t.Fatal(err)
	}
	// The store moves on: a leave on partition 1, a rejoin on partition 0.
	b := store.NewBatch()
	if _, err := b.Leave(n+1, 5); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Rejoin(5, 1_000_000); err != nil { // user 5 left at 5000
		t.Fatal(err)
	}
	for p, next := range map[int32]int64{0: 41, 1: 78} {
		if err := b.SetCheckpoint(snapTopic, p, next); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	after := scan()
	if after.Allows(n+1, 5) || !after.Allows(5, 1_000_000) {
		t.Fatal("the store's second state is not in its scan")
	}

	for at := 1; at <= len(saveSteps); at++ {
		for _, pct := range []int{0, 50, 100} {
			for seed := range int64(map[bool]int{true: 8, false: 1}[pct == 50]) {
				name := fmt.Sprintf("%s/unsynced %d%%/seed %d", saveSteps[at-1], pct, seed)
				t.Run(name, func(t *testing.T) {
					cfg := vfs.CrashCloneCfg{UnsyncedDataPercent: pct}
					if pct > 0 {
						cfg.RNG = rand.New(rand.NewPCG(uint64(seed), 11))
					}
					mem := base.CrashClone(vfs.CrashCloneCfg{}) // the previous snapshot, synced
					fs := newCrashFS(mem, at, cfg)
					_, err := gateSnapshot{path: prev.path, topic: snapTopic, fs: fs}.save(store, after, nil)
					if !errors.Is(err, errCrashed) || fs.image == nil {
						t.Fatalf("the save returned %v and took steps %v, want a crash at step %d", err, fs.steps, at)
					}
					if got := strings.Join(fs.steps, ", "); got != strings.Join(saveSteps[:at], ", ") {
						t.Fatalf("the save took steps %s, want %s", got, strings.Join(saveSteps[:at], ", "))
					}
					image := fs.image

					var rg regate
					g := gate.New()
					info, err := restoreGate(ctx, store, g, gateSnapshot{path: prev.path, topic: snapTopic, fs: image}, &rg)
					if err != nil {
						t.Fatal(err)
					}
					if info.Source != "snapshot" {
						t.Fatalf("restored from the %s (fallback %v), want a snapshot: the kill left none whole", info.Source, info.Fallback)
					}
					newOne := rg.pending() == 0
					t.Logf("loaded the %s snapshot", map[bool]string{true: "new", false: "previous"}[newOne])
					switch {
					case newOne && saveSteps[at-1] != "renamed" && saveSteps[at-1] != "directory synced":
						t.Fatal("the new snapshot is at the path before its rename")
					case !newOne && saveSteps[at-1] == "directory synced":
						t.Fatal("the new snapshot was lost after its directory's sync")
					case newOne:
						sameDecisions(t, g, after, n+1)
					default:
						sameDecisions(t, g, before, n+1)
						if !maps.Equal(info.Regate, map[int32]int64{0: 1, 1: 1}) {
							t.Fatalf("the previous snapshot owes %v, want one command of each partition", info.Regate)
						}
					}

					// The next save (a run after the restart) leaves one
					// file: the snapshot.
					if _, err := (gateSnapshot{path: prev.path, topic: snapTopic, fs: image}).save(store, after, nil); err != nil {
						t.Fatal(err)
					}
					if names, err := image.List("/data"); err != nil || len(names) != 1 || names[0] != "gate.snapshot" {
						t.Fatalf("after the next save the directory holds %v (%v), want the snapshot alone", names, err)
					}
				})
			}
		}
	}
}

// syncDirOf syncs dir on fs.
func syncDirOf(t *testing.T, fs vfs.FS, dir string) {
	t.Helper()
	d, err := fs.OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Sync(); err != nil {
		t.Fatal(err)
	}
	d.Close()
}

// TestSnapshotTruncated: a snapshot cut at any length (a copy torn by
// hand, a file system that lost its tail) is refused as bad, and the gate
// is the store's scan.
func TestSnapshotTruncated(t *testing.T) {
	const n = 40
	ctx := context.Background()
	store := snapshotStore(t, n)
	scanned := gate.New()
	if _, err := restoreGate(ctx, store, scanned, gateSnapshot{}, nil); err != nil {
		t.Fatal(err)
	}
	fs := vfs.NewMem()
	snap := gateSnapshot{path: "gate.snapshot", topic: snapTopic, fs: fs}
	if _, err := snap.save(store, scanned, nil); err != nil {
		t.Fatal(err)
	}
	whole := readAll(t, fs, snap.path)
	for size := range len(whole) {
		writeAll(t, fs, snap.path, whole[:size])
		var rg regate
		g := gate.New()
		info, err := restoreGate(ctx, store, g, snap, &rg)
		if err != nil {
			t.Fatalf("%d of %d bytes: %v", size, len(whole), err)
		}
		if info.Source != "scan" || !errors.Is(info.Fallback, gate.ErrBadSnapshot) || rg.pending() != 0 {
			t.Fatalf("%d of %d bytes: restored %+v, want the scan of a bad snapshot", size, len(whole), info)
		}
		sameDecisions(t, g, scanned, n)
	}
}

func readAll(t *testing.T, fs vfs.FS, path string) []byte {
	t.Helper()
	f, err := fs.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func writeAll(t *testing.T, fs vfs.FS, path string, b []byte) {
	t.Helper()
	f, err := fs.Create(path, vfs.WriteCategoryUnspecified)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write(slices.Clone(b)); err != nil { // vfs may change what it writes
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
}

// FuzzDecodeLabel: the label decoder never panics, refuses what it cannot
// read with errBadLabel, and what it accepts encodes to a label that
// decodes to the same; matchOlder never panics on it either.
func FuzzDecodeLabel(f *testing.F) {
	f.Add(encodeLabel("cmds", map[int32]int64{0: 40, 1: 77}))
	f.Add(encodeLabel("", nil))
	f.Add(encodeLabel("t", map[int32]int64{-1: -5}))
	f.Fuzz(func(t *testing.T, b []byte) {
		topic, cps, err := decodeLabel(b)
		if err != nil {
			if !errors.Is(err, errBadLabel) {
				t.Fatalf("error %v does not wrap errBadLabel", err)
			}
			return
		}
		topic2, cps2, err := decodeLabel(encodeLabel(topic, cps))
		if err != nil || topic2 != topic || !maps.Equal(cps, cps2) {
			t.Fatalf("re-encoded: %q %v %v, want %q %v", topic2, cps2, err, topic, cps)
		}
		_, _ = matchOlder(b, topic, map[int32]int64{0: 1, 1: 2})
	})
}

// TestSnapshotFileMode: the snapshot names every user who ever left; on
// the operating system's file system it is readable by its owner alone,
// as when it was made by os.CreateTemp.
func TestSnapshotFileMode(t *testing.T) {
	store := snapshotStore(t, 10)
	g := gate.New()
	if _, err := restoreGate(context.Background(), store, g, gateSnapshot{}, nil); err != nil {
		t.Fatal(err)
	}
	snap := gateSnapshot{path: filepath.Join(t.TempDir(), "gate.snapshot"), topic: snapTopic}
	if _, err := snap.save(store, g, nil); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(snap.path)
	if err != nil {
		t.Fatal(err)
	}
	if perm := st.Mode().Perm(); perm != 0o600 {
		t.Fatalf("snapshot mode %v, want -rw-------", perm)
	}
}
