package membership

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"
)

// The storage fault tests inject, with Pebble's errorfs, a failing read,
// write or sync, or a full disk, at a random point of one phase of the
// store's life, and check what the store promises:
//
//   - a call that meets the fault fails with a *StorageError that names the
//     store's directory and what the store was doing, with the file system's
//     error (naming the file and the system call) inside; after a failed
//     write or sync every later call fails too (ErrFailed), it never goes
//     on over a broken write-ahead log;
//   - no call reports success for something that is not in the store: once
//     the fault clears, the store opened again on the same files (and on
//     what survives a crash right after the fault) holds, byte for byte,
//     what a store that never met a fault holds after the same committed
//     batches, the failed batch in full or not at all;
//   - a failed open or restore destroys nothing.
//
// The random points are seeded: the run prints its seed, and
// COHORTGATE_FAULT_SEED=<seed> runs it again.

// faultKind is one kind of storage fault.
type faultKind struct {
	name string
	// match reports whether the fault hits op.
	match func(op errorfs.Op) bool
	// sticky faults fail every matching op from the first on, until cleared
	// (a full disk stays full); the others fail one op (a transient error).
	sticky bool
	err    error
}

func isWrite(op errorfs.Op) bool {
	return op.Kind == errorfs.OpFileWrite || op.Kind == errorfs.OpFileWriteAt
}

func isSync(op errorfs.Op) bool {
	switch op.Kind {
	case errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
		return true
	}
	return false
}

// faultKinds are the faults every phase is tested with.
var faultKinds = []faultKind{
	{name: "write", match: isWrite, err: errorfs.ErrInjected},
	{name: "sync", match: isSync, err: errorfs.ErrInjected},
	{name: "read", match: func(op errorfs.Op) bool { return op.Kind.ReadOrWrite() == errorfs.OpIsRead }, err: errorfs.ErrInjected},
	{name: "enospc", sticky: true, err: syscall.ENOSPC, match: func(op errorfs.Op) bool {
		switch op.Kind {
		case errorfs.OpCreate, errorfs.OpReuseForWrite, errorfs.OpLink, errorfs.OpRename, errorfs.OpMkdirAll, errorfs.OpFilePreallocate:
			return true
		}
		return isWrite(op) || isSync(op)
	}},
}

// injector is an errorfs.Injector that, once armed, fails the matching op
// number at (from 0), and every later one if the fault is sticky, with the
// error the operating system would give: an *fs.PathError naming the op
// and the file. Armed at -1, it only counts.
type injector struct {
	kind faultKind
	mu   struct {
		sync.Mutex
		armed    bool
		at       int // the index to fail; -1 counts only
		seen     int // matching ops since armed
		injected []string
	}
}

var _ errorfs.Injector = (*injector)(nil)

func (in *injector) String() string { return "fault " + in.kind.name }

// arm starts counting matching ops, failing op number at.
func (in *injector) arm(at int) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.mu.armed, in.mu.at, in.mu.seen, in.mu.injected = true, at, 0, nil
}

// clear stops injecting and returns how many matching ops were seen and
// which were failed.
func (in *injector) clear() (seen int, injected []string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.mu.armed = false
	return in.mu.seen, in.mu.injected
}

func (in *injector) MaybeError(op errorfs.Op) error {
	if !in.kind.match(op) {
		return nil
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	if !in.mu.armed {
		return nil
	}
	i := in.mu.seen
	in.mu.seen++
	if in.mu.at < 0 || i < in.mu.at || (i > in.mu.at && !in.kind.sticky) {
		return nil
	}
	what := opName(op.Kind)
	in.mu.injected = append(in.mu.injected, what+" "+op.Path)
	return &fs.PathError{Op: what, Path: op.Path, Err: in.kind.err}
}

// opName is the system call an op stands for, as an *fs.PathError names it.
func opName(k errorfs.OpKind) string {
	switch k {
	case errorfs.OpFileWrite, errorfs.OpFileWriteAt:
		return "write"
	case errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo:
		return "sync"
	case errorfs.OpFileRead, errorfs.OpFileReadAt:
		return "read"
	case errorfs.OpFilePreallocate:
		return "fallocate"
	case errorfs.OpCreate, errorfs.OpOpen, errorfs.OpReuseForWrite:
		return "open"
	case errorfs.OpOpenDir:
		return "opendir"
	case errorfs.OpList:
		return "readdirent"
	case errorfs.OpStat, errorfs.OpFileStat:
		return "stat"
	case errorfs.OpRename:
		return "rename"
	case errorfs.OpLink:
		return "link"
	case errorfs.OpMkdirAll:
		return "mkdir"
	}
	return fmt.Sprintf("op%d", k)
}

// faultSeed is the run's seed: COHORTGATE_FAULT_SEED, or the clock.
func faultSeed(t *testing.T) uint64 {
	t.Helper()
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("COHORTGATE_FAULT_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("COHORTGATE_FAULT_SEED=%q: %v", s, err)
		}
		seed = v
	}
	t.Logf("fault seed %d (COHORTGATE_FAULT_SEED=%d repeats this run)", seed, seed)
	return seed
}

// faultRounds is how many random points each kind and phase is tested at;
// a round that needs a child process (restoring) costs a start of the test
// binary, so those get fewer.
func faultRounds(child bool) int {
	switch {
	case testing.Short() && child:
		return 3
	case testing.Short():
		return 4
	case child:
		return 8
	}
	return 16
}

// faultBatch is one batch of the workload: commands and the checkpoint of
// the last one.
type faultBatch struct {
	cmds []Command
	next int64
}

// faultWorkload returns batches of leaves and rejoins of a few users,
// seeded, with rejoins before the boundary among them.
func faultWorkload(rng *rand.Rand, batches int) []faultBatch {
	var out []faultBatch
	var offset int64
	for range batches {
		var b faultBatch
		for range 1 + rng.IntN(4) {
			op := OpLeave
			if rng.IntN(3) == 0 {
				op = OpRejoin
			}
			b.cmds = append(b.cmds, Command{Op: op, UserID: 1 + rng.Uint64N(12), AtNs: 1 + rng.Uint64N(1000),
				RequestID: strconv.FormatInt(offset, 10)})
			offset++
		}
		b.next = offset
		out = append(out, b)
	}
	return out
}

// commitFault commits fb in one batch of s: with Commit, or, for every
// other batch, with CommitNoSyncWait and then Syncing.Wait, which must keep
// the same promises.
func commitFault(s *Store, fb faultBatch) error {
	b := s.NewBatch()
	defer b.Close()
	for _, c := range fb.cmds {
		if _, err := b.Apply(c); err != nil && !errors.Is(err, ErrRejoinBeforeLeave) {
			return err
		}
	}
	if err := b.SetCheckpoint("commands", 0, fb.next); err != nil {
		return err
	}
	if fb.next%2 == 0 {
		return b.Commit()
	}
	syncing, err := b.CommitNoSyncWait()
	if err != nil {
		return err
	}
	return syncing.Wait()
}

// reference is the dump of a store that never met a fault, after batches.
func reference(t *testing.T, batches []faultBatch) string {
	t.Helper()
	s := openMem(t)
	for _, fb := range batches {
		if err := commitFault(s, fb); err != nil {
			t.Fatal(err)
		}
	}
	return dump(t, s)
}

// checkStorageError checks that err is a *StorageError of the store in dir
// whose cause is the file system error the injector gave.
func checkStorageError(t *testing.T, err error, dir string, kind faultKind, injected []string) {
	t.Helper()
	var se *StorageError
	if !errors.As(err, &se) {
		t.Fatalf("error %q (%T) is no *StorageError", err, err)
	}
	var pe *fs.PathError
	switch {
	case se.Dir != dir || se.Op == "":
		t.Fatalf("error %q names dir %q and op %q, want dir %q and an op", err, se.Dir, se.Op, dir)
	case !errors.Is(err, kind.err) || !errors.As(err, &pe):
		t.Fatalf("error %q does not wrap the injected %v (injected: %v)", err, kind.err, injected)
	case !strings.Contains(err.Error(), dir) || !strings.Contains(err.Error(), pe.Path) || !strings.Contains(err.Error(), pe.Op):
		t.Fatalf("error %q does not say where (%s, %s) and what (%s)", err, dir, pe.Path, pe.Op)
	}
}

// closeWithin closes s, failing the test if Close does not return in time.
func closeWithin(t *testing.T, s *Store) error {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- s.Close() }()
	select {
	case err := <-done:
		return err
	case <-time.After(10 * time.Second):
		t.Fatal("Close of a store that met a fault did not return within 10s")
		return nil
	}
}

// TestFaultApplying injects each fault kind at random points of applying
// batches of commands to a store that was just opened again (so that its
// records are in tables on disk, and applying a command reads them), then
// clears the fault and checks the store, reopened on the same files and on
// what a crash right after the fault leaves, against a store that never
// met a fault. No background job of Pebble runs meanwhile: the workload is
// too small to fill a memtable.
func TestFaultApplying(t *testing.T) {
	seed := faultSeed(t)
	for ki, kind := range faultKinds {
		t.Run(kind.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, uint64(ki)))
			before, work := faultWorkload(rng, 20), faultWorkload(rng, 40)
			mem, _ := faultStore(t, vfs.NewCrashableMem(), "db", before)
			total := countOps(t, kind, mem, func(s *Store) {
				for _, fb := range work {
					if err := commitFault(s, fb); err != nil {
						t.Fatal(err)
					}
				}
			})
			outcomes := make(map[string]int)
			for round := range faultRounds(false) {
				at := rng.IntN(total)
				outcomes[faultApplyingAt(t, kind, copyFS(mem), before, work, at, round)]++
			}
			t.Logf("%d %s ops to fail from; outcomes %v", total, kind.name, outcomes)
		})
	}
}

// copyFS returns a copy of mem with everything written, synced or not: a
// process restart keeps what the operating system has.
func copyFS(mem *vfs.MemFS) *vfs.MemFS {
	return mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 100, RNG: rand.New(rand.NewPCG(0, 0))})
}

// reopenCold opens the store in dir on fs with a small cache, waiting for the
// flush Pebble starts when it opens a store whose log has records, so that
// no background job runs once it returns.
func reopenCold(fs vfs.FS, dir string) (*Store, error) {
	s, err := Open(dir, &Options{FS: fs, CacheSize: 64 << 10})
	if err != nil {
		return nil, err
	}
	if err := s.db.Flush(); err != nil {
		return nil, errors.Join(err, s.Close())
	}
	return s, nil
}

// countOps counts the ops of kind that fn makes on the store of mem,
// reopened cold on a copy.
func countOps(t *testing.T, kind faultKind, mem *vfs.MemFS, fn func(*Store)) int {
	t.Helper()
	inj := &injector{kind: kind}
	s, err := reopenCold(errorfs.Wrap(copyFS(mem), inj), "db")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	inj.arm(-1)
	fn(s)
	seen, _ := inj.clear()
	if seen == 0 {
		t.Fatalf("applying makes no %s op: the test injects nothing", kind.name)
	}
	return seen
}

// faultApplyingAt is one round of TestFaultApplying: the fault at the
// matching op number at, on mem, which holds the batches before. It
// returns the outcome, for the log.
func faultApplyingAt(t *testing.T, kind faultKind, mem *vfs.MemFS, before, work []faultBatch, at, round int) string {
	t.Helper()
	const dir = "db"
	inj := &injector{kind: kind}
	s, err := reopenCold(errorfs.Wrap(mem, inj), dir)
	if err != nil {
		t.Fatal(err)
	}
	inj.arm(at)
	acked := 0
	var failErr error
	for _, fb := range work {
		if failErr = commitFault(s, fb); failErr != nil {
			break
		}
		acked++
	}
	// What survives a crash right now, before Close can write anything.
	crashed := crash(mem)
	_, injected := inj.clear()
	outcome := "absorbed"
	if failErr != nil {
		checkStorageError(t, failErr, dir, kind, injected)
		outcome = "failed"
		if errors.Is(failErr, ErrFailed) {
			outcome = "store failed"
			// It refuses everything after, and says why.
			if _, err := s.Leave(999, 1); !errors.Is(err, ErrFailed) {
				t.Fatalf("round %d: Leave after the failure = %v, want ErrFailed", round, err)
			}
		}
	}
	if err := closeWithin(t, s); failErr == nil && err != nil {
		t.Fatalf("round %d: Close: %v", round, err)
	}
	if failErr == nil && len(injected) > 0 {
		t.Logf("round %d: fault at %v went unnoticed by the calls", round, injected)
	}

	// After a restart on the same files, and after a crash: every acked
	// batch is there, the failed one in full or not at all.
	for _, after := range []struct {
		name string
		fs   vfs.FS
	}{{"restart", mem}, {"crash", crashed}} {
		s := openFS(t, after.fs, nil)
		next, ok, err := s.Checkpoint("commands", 0)
		if err != nil {
			t.Fatal(err)
		}
		n := acked
		if failErr != nil && ok && next == work[acked].next {
			n++ // the failed batch made it, in full (checked below)
		}
		if acked > 0 && (!ok || next < work[acked-1].next) {
			t.Fatalf("round %d, %s: checkpoint %d (%v), want at least %d: an acknowledged batch was lost (fault at %v)",
				round, after.name, next, ok, work[acked-1].next, injected)
		}
		if got, want := dump(t, s), reference(t, append(slices.Clone(before), work[:n]...)); got != want {
			t.Fatalf("round %d, %s after the fault at %v (error %v): the store differs from one that never met a fault after %d batches\ngot:\n%s\nwant:\n%s",
				round, after.name, injected, failErr, n, got, want)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	return outcome
}

// faultStore commits every batch of work to a store in dir on fs, flushed
// into two tables so that reading it reads the disk (two, not the four
// that would start a compaction), and returns fs and the store's dump.
func faultStore[F vfs.FS](t *testing.T, fs F, dir string, work []faultBatch) (F, string) {
	t.Helper()
	s, err := Open(dir, &Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	for i, fb := range work {
		if err := commitFault(s, fb); err != nil {
			t.Fatal(err)
		}
		if i == len(work)/2 {
			if err := s.db.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := s.db.Flush(); err != nil {
		t.Fatal(err)
	}
	want := dump(t, s)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return fs, want
}

// startUp is what a processor does with its store at start: open it,
// restore every member, read its checkpoint and its outbox. It returns the
// first error and the store, open or nil.
func startUp(fs vfs.FS, dir string) (*Store, int, error) {
	s, err := Open(dir, &Options{FS: fs, CacheSize: 64 << 10, BackgroundFailureTimeout: 500 * time.Millisecond})
	if err != nil {
		return nil, 0, err
	}
	members := 0
	if _, err := s.Restore(context.Background(), func(Member) error { members++; return nil }); err != nil {
		return s, members, err
	}
	if _, _, err := s.Checkpoint("commands", 0); err != nil {
		return s, members, err
	}
	return s, members, s.Outbox(func(uint64, []byte) error { return nil })
}

// TestFaultRestoring injects each fault kind at random points of opening a
// store and restoring every member from it (what a processor does at
// start), on a store whose records are in tables on disk, then clears the
// fault and checks that nothing was lost: the store reopens with every
// record, byte for byte.
//
// Opening a store starts a flush in the background, and Pebble cannot go on
// from a failed write or sync of its MANIFEST or directory there: that
// fails the store (see background.fatalHere); it used to end the process
// with a panic. Each round runs in a child process of the test, on a
// directory on disk, so that a panic would end the child, not the test:
// the child must report the error it met (naming the store's directory and
// the fault), or nothing, and never die.
func TestFaultRestoring(t *testing.T) {
	seed := faultSeed(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for ki, kind := range faultKinds {
		t.Run(kind.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, 100+uint64(ki)))
			dir := filepath.Join(t.TempDir(), "db")
			_, want := faultStore(t, vfs.Default, dir, faultWorkload(rng, 30))
			inj := &injector{kind: kind}
			inj.arm(-1)
			s, members, err := startUp(errorfs.Wrap(vfs.Default, inj), dir)
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			total, _ := inj.clear()
			if total == 0 {
				t.Fatalf("opening and restoring make no %s op: the test injects nothing", kind.name)
			}
			outcomes := make(map[string]int)
			for round := range faultRounds(true) {
				at := rng.IntN(total)
				ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
				cmd := exec.CommandContext(ctx, exe, "-test.run=^TestFaultRestoringChild$", "-test.v")
				cmd.Env = append(os.Environ(), "COHORTGATE_FAULT_CHILD="+fmt.Sprintf("%s,%d,%d,%s", kind.name, at, members, dir))
				out, err := cmd.CombinedOutput()
				cancel()
				switch {
				case err == nil && bytes.Contains(out, []byte("outcome: ")):
					o := string(out[bytes.Index(out, []byte("outcome: "))+len("outcome: "):])
					outcomes[strings.TrimSpace(o[:strings.IndexByte(o, '\n')])]++
				default:
					t.Fatalf("round %d (fault %s at %d): child %v:\n%s", round, kind.name, at, err, out)
				}
				s, err := Open(dir, nil)
				if err != nil {
					t.Fatalf("round %d: open after the fault cleared: %v", round, err)
				}
				got := dump(t, s)
				if err := s.Close(); err != nil {
					t.Fatal(err)
				}
				if got != want {
					t.Fatalf("round %d: after the fault %s at %d and a restart, the store lost records\ngot:\n%s\nwant:\n%s",
						round, kind.name, at, got, want)
				}
			}
			t.Logf("%d %s ops to fail from; outcomes %v", total, kind.name, outcomes)
		})
	}
}

// TestFaultRestoringChild is one round of TestFaultRestoring, run by it in
// a child process; otherwise it does nothing.
func TestFaultRestoringChild(t *testing.T) {
	spec := os.Getenv("COHORTGATE_FAULT_CHILD")
	if spec == "" {
		t.Skip("run by TestFaultRestoring")
	}
	f := strings.SplitN(spec, ",", 4)
	at, _ := strconv.Atoi(f[1])
	members, _ := strconv.Atoi(f[2])
	dir := f[3]
	i := slices.IndexFunc(faultKinds, func(k faultKind) bool { return k.name == f[0] })
	kind := faultKinds[i]
	inj := &injector{kind: kind}
	inj.arm(at)
	s, got, err := startUp(errorfs.Wrap(vfs.Default, inj), dir)
	_, injected := inj.clear()
	switch {
	case err != nil:
		checkStorageError(t, err, dir, kind, injected)
		fmt.Println("outcome: failed")
	case got != members:
		t.Fatalf("restored %d members without an error, want %d (fault at %v)", got, members, injected)
	default:
		fmt.Println("outcome: absorbed")
	}
	if s != nil {
		_ = closeWithin(t, s)
	}
}

// TestFaultCommitIsAnError: a write of the log that fails under a commit is
// the commit's error, naming the store's directory and the file, and the
// store refuses every later call; it is not a panic out of the call, which
// is what Pebble's Fatalf used to be (it ended the processor with a stack
// trace instead of the error).
func TestFaultCommitIsAnError(t *testing.T) {
	inj := &injector{kind: faultKinds[0]} // write
	s := openFS(t, errorfs.Wrap(vfs.NewMem(), inj), nil)
	inj.arm(0)
	call := func(u uint64) (err error) {
		defer func() {
			if r := recover(); r != nil {
				err = fmt.Errorf("panic: %v", r)
			}
		}()
		_, err = s.Leave(u, 100)
		return err
	}
	err := call(1)
	if err == nil || strings.HasPrefix(err.Error(), "panic") || !errors.Is(err, errorfs.ErrInjected) ||
		!strings.Contains(err.Error(), "commit") || !strings.Contains(err.Error(), "in db") || !strings.Contains(err.Error(), "write db/") {
		t.Fatalf("Leave with the log failing = %v, want an error of the commit naming the store (db), the file and the write", err)
	}
	inj.clear()
	if err := call(2); err == nil || strings.HasPrefix(err.Error(), "panic") || !errors.Is(err, errorfs.ErrInjected) {
		t.Fatalf("Leave after the failure, the disk healed = %v, want the store's failure again", err)
	}
	if err := s.Close(); !errors.Is(err, ErrFailed) {
		t.Fatalf("Close = %v, want the store's failure again", err)
	}
}

// sstFull fails every write of a table with ENOSPC while on: a disk that
// has room left in the log's reserved space, none for a flush.
type sstFull struct{ on atomic.Bool }

func (f *sstFull) String() string { return "no space for tables" }

func (f *sstFull) MaybeError(op errorfs.Op) error {
	if f.on.Load() && strings.HasSuffix(op.Path, ".sst") && op.Kind != errorfs.OpFileRead && op.Kind != errorfs.OpFileReadAt &&
		op.Kind.ReadOrWrite() == errorfs.OpIsWrite {
		return &fs.PathError{Op: opName(op.Kind), Path: op.Path, Err: syscall.ENOSPC}
	}
	return nil
}

// TestFaultBackgroundFlushFailsStore: a flush that keeps failing (no room
// for tables) fails the store once BackgroundFailureTimeout has passed,
// both under an Open, which waits for the flush of the log it found, and
// under a running store. Pebble retries the flush without end: Open never
// returned, and a running store only stalled once its memtables were full.
func TestFaultBackgroundFlushFailsStore(t *testing.T) {
	mem := vfs.NewCrashableMem()
	full := &sstFull{}
	opts := &Options{FS: errorfs.Wrap(mem, full), BackgroundFailureTimeout: 300 * time.Millisecond}
	s, err := Open("db", opts)
	if err != nil {
		t.Fatal(err)
	}
	mustOK(t)(s.Leave(1, 100))

	// Running: a flush starts and keeps failing; then calls fail.
	full.on.Store(true)
	_, _ = s.db.AsyncFlush()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := s.Leave(2, 100)
		if errors.Is(err, ErrFailed) {
			checkStorageError(t, err, "db", faultKinds[3], nil)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Leave 10s into a flush that keeps failing = %v, want the store failed", err)
		}
		time.Sleep(50 * time.Millisecond) // polling a condition with a deadline
	}
	if err := closeWithin(t, s); !errors.Is(err, ErrFailed) {
		t.Fatalf("Close = %v, want the failure", err)
	}

	// Opening, in another process (a copy of the files: the failed
	// store's Pebble keeps its lock while its flush fails): the log holds
	// user 1's leave, whose flush keeps failing.
	mem = copyFS(mem)
	opts.FS = errorfs.Wrap(mem, full)
	done := make(chan error, 1)
	go func() {
		s, err := Open("db", opts)
		if err == nil {
			err = errors.Join(errors.New("opened"), s.Close())
		}
		done <- err
	}()
	select {
	case err := <-done:
		if !errors.Is(err, ErrFailed) {
			t.Fatalf("Open with no room for tables = %v, want the store failed", err)
		}
		checkStorageError(t, err, "db", faultKinds[3], nil)
	case <-time.After(10 * time.Second):
		t.Fatal("Open with no room for tables has not returned in 10s")
	}

	// Room again: Pebble finishes the abandoned open and the store closes
	// it; then the store opens with everything in it.
	full.on.Store(false)
	var after *Store
	for deadline := time.Now().Add(10 * time.Second); ; {
		if after, err = Open("db", &Options{FS: mem}); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond) // the abandoned open releasing its lock
	}
	if err != nil {
		t.Fatal(err)
	}
	defer after.Close()
	if m, err := after.Status(1); err != nil || m.Status != Left {
		t.Fatalf("user 1 after the disk has room again: %+v, %v", m, err)
	}
}

// manifestBroken fails every write and sync of a MANIFEST once on.
type manifestBroken struct{ on atomic.Bool }

func (f *manifestBroken) String() string { return "MANIFEST writes fail" }

func (f *manifestBroken) MaybeError(op errorfs.Op) error {
	if f.on.Load() && strings.Contains(op.Path, "MANIFEST") && (isWrite(op) || isSync(op)) {
		return &fs.PathError{Op: opName(op.Kind), Path: op.Path, Err: errorfs.ErrInjected}
	}
	return nil
}

// TestFaultManifestInBackground: a flush whose write of the MANIFEST fails,
// in a goroutine of Pebble's own, fails the store: Failed's channel is
// closed, Err and every later call name the directory, the file and the
// fault, Close returns the failure at once, and the process goes on.
// Before, nothing could recover the panic of Pebble's Fatalf there: it
// ended the process (this test's binary) with a stack trace.
func TestFaultManifestInBackground(t *testing.T) {
	mem := vfs.NewCrashableMem()
	broken := &manifestBroken{}
	s, err := Open("db", &Options{FS: errorfs.Wrap(mem, broken)})
	if err != nil {
		t.Fatal(err)
	}
	mustOK(t)(s.Leave(1, 100))
	select {
	case <-s.Failed():
		t.Fatal("Failed is closed before any fault")
	default:
	}
	if err := s.Err(); err != nil {
		t.Fatalf("Err before any fault = %v", err)
	}

	broken.on.Store(true)
	if _, err := s.db.AsyncFlush(); err != nil {
		t.Fatal(err)
	}
	select {
	case <-s.Failed():
	case <-time.After(10 * time.Second):
		t.Fatal("the store has not failed 10s into a flush whose MANIFEST write fails")
	}
	err = s.Err()
	var pe *fs.PathError
	if !errors.Is(err, ErrFailed) || !errors.Is(err, errorfs.ErrInjected) || !errors.As(err, &pe) ||
		!strings.Contains(err.Error(), "db") || !strings.Contains(err.Error(), pe.Path) || !strings.Contains(pe.Path, "MANIFEST") {
		t.Fatalf("Err = %v, want the failure naming the store's directory, the MANIFEST and the fault", err)
	}
	if _, err := s.Leave(2, 100); !errors.Is(err, ErrFailed) {
		t.Fatalf("Leave after the failure = %v, want ErrFailed", err)
	}
	if err := closeWithin(t, s); !errors.Is(err, ErrFailed) {
		t.Fatalf("Close = %v, want the failure", err)
	}

	// The files, as a restart finds them once the disk is fixed (a copy:
	// the failed store's Pebble keeps its lock): the committed leave is
	// there, the refused one is not.
	after, err := Open("db", &Options{FS: copyFS(mem)})
	if err != nil {
		t.Fatal(err)
	}
	defer after.Close()
	if m, err := after.Status(1); err != nil || m.Status != Left {
		t.Fatalf("user 1 after a restart: %+v, %v", m, err)
	}
	if m, err := after.Status(2); err != nil || m.Status != Active {
		t.Fatalf("user 2 after a restart: %+v, %v", m, err)
	}
}

// TestBackgroundFatalOrder: a background job's fatal error closes the
// channel that tells Close not to wait for Pebble before the store is
// seen failed. In the other order, a caller woken by Failed could close
// the store in between and wait for ever on the job that ended with the
// failure (TestFaultManifestInBackground: Close did not return, once in
// CI under load).
func TestBackgroundFatalOrder(t *testing.T) {
	var bg *background
	var closedFirst bool
	bg = newBackground("db", time.Second, slog.New(slog.DiscardHandler), func(f *fatalError) {
		select {
		case <-bg.failed:
			closedFirst = bg.err == f
		default:
		}
	})
	f := &fatalError{dir: "db", msg: "MANIFEST write failed"}
	bg.fatal(f)
	if !closedFirst {
		t.Fatal("the store was marked failed before the background failure (and its error) was recorded")
	}
	bg.fatal(&fatalError{dir: "db", msg: "later"})
	if bg.err != f {
		t.Fatalf("a second fatal error replaced the first: %v", bg.err.msg)
	}
}
