package integration

import (
	"bytes"
	bin "encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/cohortgate/cohortgate/pkg/membership"
	"github.com/cohortgate/cohortgate/topics"
)

// pauseFS is a crashable in-memory file system on which, once armed, the
// gate snapshot's writer stops at a chosen step of its save and waits,
// so that a test can take the crash image of that moment
// (vfs.MemFS.CrashClone) with the write under way; released, the step
// fails, as the write of a killed process never ends.
type pauseFS struct {
	*vfs.MemFS
	at      string // "half written" (the temporary file) or "renamed" (not the directory's sync)
	armed   atomic.Bool
	paused  chan struct{} // closed once the writer waits
	release chan struct{} // closed by the test (unpause)
	once    sync.Once
	freed   sync.Once
}

// unpause lets the writer go on, failing the step it waits at.
func (f *pauseFS) unpause() { f.freed.Do(func() { close(f.release) }) }

func newPauseFS(mem *vfs.MemFS, at string) *pauseFS {
	return &pauseFS{MemFS: mem, at: at, paused: make(chan struct{}), release: make(chan struct{})}
}

var errKilled = errors.New("killed during the snapshot write")

// pause makes the writer wait at step, if it is the chosen one and armed.
func (f *pauseFS) pause(step string) error {
	if step != f.at || !f.armed.Load() {
		return nil
	}
	f.once.Do(func() { close(f.paused) })
	<-f.release
	return errKilled
}

func (f *pauseFS) Create(name string, cat vfs.DiskWriteCategory) (vfs.File, error) {
	file, err := f.MemFS.Create(name, cat)
	if err != nil || !strings.Contains(name, ".tmp-") {
		return file, err
	}
	return &pauseFile{File: file, fs: f}, nil
}

func (f *pauseFS) Rename(from, to string) error {
	if err := f.MemFS.Rename(from, to); err != nil {
		return err
	}
	return f.pause("renamed")
}

type pauseFile struct {
	vfs.File
	fs *pauseFS
}

func (p *pauseFile) Write(b []byte) (int, error) {
	n, err := p.File.Write(b[:len(b)/2])
	if err != nil {
		return n, err
	}
	if err := p.fs.pause("half written"); err != nil {
		return n, err
	}
	m, err := p.File.Write(b[len(b)/2:])
	return n + m, err
}

// TestKillDuringSnapshotWrite: a processor that writes its gate snapshot
// while running is killed in the middle of a write (its temporary file
// half written, or renamed over the previous one before the directory's
// sync), with the unsynced data of the moment kept (a kill) or lost (a
// power loss). Started again on what the kill left, it loads a whole
// snapshot (the previous one, older than the store, or the new one),
// never the torn file, which a later save removes; its state equals a
// replay's, and its gate forwards the signals the replay's episodes
// allow.
func TestKillDuringSnapshotWrite(t *testing.T) {
	for _, tc := range []struct {
		at        string
		unsynced  int  // percent of the unsynced data the crash keeps
		wantFresh bool // the new snapshot survives
	}{
		{"half written", 100, false},
		{"half written", 0, false},
		{"renamed", 100, true},
		{"renamed", 0, false},
	} {
		t.Run(fmt.Sprintf("%s, %d%% unsynced kept", tc.at, tc.unsynced), func(t *testing.T) {
			seed := rand.Uint64()
			t.Logf("seed %d", seed)
			rng := rand.New(rand.NewPCG(seed, 0x5a4b))
			e := newEnv(t, 2)
			t0 := base()
			const users = 12
			commands := func(n int) {
				for range n {
					op := topics.Leave
					if rng.IntN(3) == 0 {
						op = topics.Rejoin
					}
					e.command(op, 1+rng.Uint64N(users), t0.Add(time.Duration(rng.IntN(20_000))*time.Millisecond))
				}
			}

			// The store and the snapshot on two crashable file systems:
			// the store's cloned whole, as a kill leaves it (the kernel
			// keeps what was written; the store's own crashes are
			// pkg/membership's tests'), the snapshot's with the share of
			// its unsynced writes the case says, so that a power loss can
			// take the temporary file or the rename. A clone that dropped
			// a batch of the store would not be a kill here: the
			// processor, paused only in its snapshot writer, goes on
			// committing to Kafka what that batch did.
			storeFS := vfs.NewCrashableMem()
			if err := storeFS.MkdirAll("/data/membership", 0o755); err != nil {
				t.Fatal(err)
			}
			mem := vfs.NewCrashableMem()
			if err := mem.MkdirAll("/data", 0o755); err != nil {
				t.Fatal(err)
			}
			syncDirs(t, mem, "/", "/data")
			fs := newPauseFS(mem, tc.at)
			store, err := membership.Open("/data/membership", &membership.Options{FS: storeFS})
			if err != nil {
				t.Fatal(err)
			}
			cfg := e.config()
			cfg.GateSnapshot = "/data/gate.snapshot"
			cfg.GateSnapshotInterval = 100 * time.Millisecond
			cfg.Testing.SnapshotFS = fs
			var ev restarts
			runCfg := cfg
			ev.listen(&runCfg)
			run := e.startOn(store, runCfg)
			t.Cleanup(fs.unpause) // before the stop (cleanups run last first)
			run.waitReady(t, 2)

			// A snapshot written while running that holds a leave of
			// every user (so its label names both partitions: a snapshot
			// that predates a partition's first command is refused once
			// the store has it), then commands after it and the next
			// write, stopped at the chosen step.
			for u := uint64(1); u <= users; u++ {
				e.command(topics.Leave, u, t0.Add(time.Duration(rng.IntN(20_000))*time.Millisecond))
			}
			eventually(t, 30*time.Second, func() error {
				ev.mu.Lock()
				defer ev.mu.Unlock()
				for _, s := range ev.saved {
					if s.Running && s.Err == nil && s.Members == users {
						return nil
					}
				}
				return errors.New("no gate snapshot of every user's leave written while running yet")
			})
			fs.armed.Store(true)
			// What the path holds until the paused save renames its file
			// over it (a save under way when armed pauses too).
			prev := readFile(t, mem, cfg.GateSnapshot)
			commands(5 + rng.IntN(10))
			// The writer stops between two batches, with some of the
			// commands applied, perhaps not all.
			eventually(t, 30*time.Second, func() error {
				select {
				case <-fs.paused:
					return nil
				default:
					return errors.New("the snapshot writer has not reached " + tc.at)
				}
			})
			cc := vfs.CrashCloneCfg{UnsyncedDataPercent: tc.unsynced}
			if tc.unsynced > 0 {
				cc.RNG = rand.New(rand.NewPCG(seed, 1))
			}
			storeImage := storeFS.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 100, RNG: rand.New(rand.NewPCG(seed, 2))})
			image := mem.CrashClone(cc)
			atPause := readFile(t, mem, cfg.GateSnapshot)
			switch onImage := readFile(t, image, cfg.GateSnapshot); {
			case tc.wantFresh && !bytes.Equal(onImage, atPause):
				t.Fatal("the kill lost the renamed snapshot, want it kept with the rename")
			case !tc.wantFresh && !bytes.Equal(onImage, prev):
				t.Fatal("the kill left another snapshot than the previous one at the path")
			case tc.at == "renamed" && bytes.Equal(atPause, prev):
				t.Fatal("the paused save renamed nothing")
			}
			temps := tempFiles(t, image)
			t.Logf("the kill left %v", temps)
			if tc.at == "half written" && tc.unsynced == 100 && len(temps) != 1 {
				t.Fatalf("the kill left temporary files %v, want the one half written", temps)
			}
			fs.unpause()
			if err := run.stop(t); err != nil {
				t.Fatal(err)
			}

			// The restart, on what the kill left.
			store2, err := membership.Open("/data/membership", &membership.Options{FS: storeImage})
			if err != nil {
				t.Fatal(err)
			}
			var ev2 restarts
			cfg2 := cfg
			cfg2.Testing.SnapshotFS = image
			ev2.listen(&cfg2)
			after := e.startOn(store2, cfg2)
			after.waitReady(t, 2)
			if src := ev2.source(t); src != "snapshot" {
				t.Fatalf("restored from the %s (fallback %v), want a snapshot", src, ev2.restored[0].Fallback)
			}
			t.Logf("restored %v, commands applied again by partition %v", ev2.restored[0], ev2.restored[0].Regate)
			got := membersOf(t, after, users)
			want := replayMembers(t, e, cfg, users)
			if !reflect.DeepEqual(got, want) {
				t.Fatalf("after the kill: %+v\nreplay: %+v", got, want)
			}
			var sigs []sig
			for u := uint64(1); u <= users; u++ {
				for ms := -500; ms <= 20_500; ms += 500 {
					d := time.Duration(ms) * time.Millisecond
					sigs = append(sigs, sig{user: u, at: d, forward: allows(want[u], uint64(t0.Add(d).UnixNano()))})
				}
			}
			wantFwd := e.produceSignals(t0, sigs)
			e.waitDecided()
			if gotFwd := e.forwardedValues(); !slices.Equal(gotFwd, wantFwd) {
				t.Errorf("forwarded %d signals, want %d: the gate after the kill is not the replay's", len(gotFwd), len(wantFwd))
			}
			if err := after.stop(t); err != nil {
				t.Fatal(err)
			}
			// The clean stop wrote the snapshot: the torn file is gone.
			if left := tempFiles(t, image); len(left) > 0 {
				t.Errorf("temporary files left after the next save: %v", left)
			}
		})
	}
}

// readFile is the contents of path on fs.
func readFile(t *testing.T, fs vfs.FS, path string) []byte {
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

// tempFiles lists the gate snapshot's temporary files in /data of fs.
func tempFiles(t *testing.T, fs vfs.FS) []string {
	t.Helper()
	names, err := fs.List("/data")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, n := range names {
		if strings.Contains(n, ".tmp-") {
			out = append(out, n)
		}
	}
	return out
}

// syncDirs syncs each directory of fs, so that a crash keeps them.
func syncDirs(t *testing.T, fs vfs.FS, dirs ...string) {
	t.Helper()
	for _, dir := range dirs {
		d, err := fs.OpenDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Sync(); err != nil {
			t.Fatal(err)
		}
		d.Close()
	}
}

// stepFS is a crashable in-memory file system that calls onStep, in the
// gate snapshot's writer, once the directory of a renamed snapshot is
// synced: the moment a save is complete.
type stepFS struct {
	*vfs.MemFS
	onStep func()
}

func (f *stepFS) OpenDir(name string) (vfs.File, error) {
	d, err := f.MemFS.OpenDir(name)
	if err != nil {
		return nil, err
	}
	return &stepDir{File: d, fs: f}, nil
}

type stepDir struct {
	vfs.File
	fs *stepFS
}

func (d *stepDir) Sync() error {
	err := d.File.Sync()
	if err == nil {
		d.fs.onStep()
	}
	return err
}

// TestSnapshotNeverAboveTheStore: a power loss right after a gate
// snapshot written while running is complete keeps the snapshot and, of
// the store, only what was synced. The snapshot must not be labelled
// above that store in any partition: such a snapshot is refused, and the
// start after the crash scans the store. The store's commits are synced
// by a goroutine of their own while the next batch is applied, so the
// label is lowered to the claims' applied offsets; this checks it, at
// every save of a stream of commands, with the label read from the file
// by the format alone.
func TestSnapshotNeverAboveTheStore(t *testing.T) {
	e := newEnv(t, 2)
	t0 := base()
	storeFS := vfs.NewCrashableMem()
	if err := storeFS.MkdirAll("/data/membership", 0o755); err != nil {
		t.Fatal(err)
	}
	syncDirs(t, storeFS, "/", "/data")
	mem := vfs.NewCrashableMem()
	if err := mem.MkdirAll("/data", 0o755); err != nil {
		t.Fatal(err)
	}
	syncDirs(t, mem, "/", "/data")
	store, err := membership.Open("/data/membership", &membership.Options{FS: storeFS})
	if err != nil {
		t.Fatal(err)
	}
	cfg := e.config()
	cfg.GateSnapshot = "/data/gate.snapshot"
	cfg.GateSnapshotInterval = 20 * time.Millisecond
	var mu sync.Mutex
	var checked int
	var failures []string
	fs := &stepFS{MemFS: mem}
	fs.onStep = func() {
		// The applier waits here: nothing of the gate changes, the
		// syncer may still be syncing a batch.
		storeImage := storeFS.CrashClone(vfs.CrashCloneCfg{})
		label := snapshotLabel(t, mem, cfg.GateSnapshot)
		img, err := membership.Open("/data/membership", &membership.Options{FS: storeImage})
		if err != nil {
			t.Error(err)
			return
		}
		defer img.Close()
		cps, err := img.Checkpoints(string(cfg.Topics.Commands))
		if err != nil {
			t.Error(err)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		checked++
		for p, at := range label {
			if at > cps[p] {
				failures = append(failures, fmt.Sprintf("partition %d at %d in the snapshot, %d in the synced store", p, at, cps[p]))
			}
		}
	}
	cfg.Testing.SnapshotFS = fs
	pr := e.startOn(store, cfg)
	pr.waitReady(t, 2)
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 3))
	count := func() int {
		mu.Lock()
		defer mu.Unlock()
		return checked
	}
	// Rounds of commands, each followed by the save it makes due: the
	// syncer is busy while some of them are written.
	for round := range 12 {
		before := count()
		for i := range 1 + rng.IntN(20) {
			op := topics.Leave
			if rng.IntN(3) == 0 {
				op = topics.Rejoin
			}
			e.command(op, 1+rng.Uint64N(40), t0.Add(time.Duration(round*100+i)*time.Millisecond))
		}
		eventually(t, 30*time.Second, func() error {
			if n := count(); n == before {
				return fmt.Errorf("no save after round %d", round)
			}
			return nil
		})
	}
	if err := pr.stop(t); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d saves checked", checked)
	if len(failures) > 0 {
		t.Errorf("%d of %d snapshots above the synced store, first: %s", len(failures), checked, failures[0])
	}
}

// snapshotLabel reads the label of the gate snapshot at path from the
// documented format alone: a 64-byte header whose bytes 12 to 16 are the
// label's length, then the label: version 1, the topic (u16 length), the
// partition count (u32), then each partition (u32) and its next offset
// (u64), little-endian.
func snapshotLabel(t *testing.T, fs vfs.FS, path string) map[int32]int64 {
	t.Helper()
	b := readFile(t, fs, path)
	const headerLen = 64
	if len(b) < headerLen {
		t.Fatalf("snapshot of %d bytes", len(b))
	}
	n := int(bin.LittleEndian.Uint32(b[12:]))
	l := b[headerLen : headerLen+n]
	if l[0] != 1 {
		t.Fatalf("label version %d", l[0])
	}
	tl := int(bin.LittleEndian.Uint16(l[1:]))
	l = l[3+tl:]
	count := int(bin.LittleEndian.Uint32(l))
	l = l[4:]
	out := make(map[int32]int64, count)
	for i := range count {
		out[int32(bin.LittleEndian.Uint32(l[12*i:]))] = int64(bin.LittleEndian.Uint64(l[12*i+4:]))
	}
	return out
}

// TestCommandsAppliedDuringSnapshotWrite: a gate snapshot written while
// running does not hold the commands while it is written (a slow disk):
// a leave sent while the writer waits is applied, and the write, once it
// goes on, ends. The applier wrote the snapshot itself, between two
// batches, and applied nothing until the write had ended.
func TestCommandsAppliedDuringSnapshotWrite(t *testing.T) {
	e := newEnv(t, 2)
	mem := vfs.NewMem()
	if err := mem.MkdirAll("/data", 0o755); err != nil {
		t.Fatal(err)
	}
	fs := newPauseFS(mem, "half written")
	cfg := e.config()
	cfg.GateSnapshot = "/data/gate.snapshot"
	cfg.GateSnapshotInterval = 100 * time.Millisecond
	cfg.Testing.SnapshotFS = fs
	var ev restarts
	ev.listen(&cfg)
	pr := e.start(t.TempDir(), cfg)
	t.Cleanup(fs.unpause) // before the stop (cleanups run last first)
	pr.waitReady(t, 2)

	t0 := base()
	fs.armed.Store(true)
	e.command(topics.Leave, 1, t0)
	eventually(t, 30*time.Second, func() error {
		select {
		case <-fs.paused:
			return nil
		default:
			return errors.New("no gate snapshot write under way yet")
		}
	})
	e.command(topics.Leave, 2, t0)
	eventually(t, 30*time.Second, func() error {
		m, err := pr.Member(2)
		if err != nil {
			return err
		}
		if m.LeftAtNs == nil {
			return errors.New("the leave sent during the snapshot write is not applied")
		}
		return nil
	})
	fs.unpause()
	if err := pr.stop(t); err != nil {
		t.Fatal(err)
	}
	ev.mu.Lock()
	defer ev.mu.Unlock()
	for _, s := range ev.saved {
		if s.Running && errors.Is(s.Err, errKilled) {
			return
		}
	}
	t.Fatalf("the stalled write did not end: %v", ev.saved)
}
