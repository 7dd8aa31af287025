package integration

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cockroachdb/pebble/v2/vfs/errorfs"

	"github.com/cohortgate/cohortgate/pkg/fanout"
	"github.com/cohortgate/cohortgate/pkg/membership"
	"github.com/cohortgate/cohortgate/topics"
)

// Storage faults under a running processor. A store that cannot write,
// sync or read fails the call that met the fault with an error naming its
// directory (pkg/membership's fault tests cover the store itself); the
// processor does not retry: the commands side returns the error and the
// processor halts (Run returns it), because the signals it holds wait for
// commands it cannot apply. Signals it had not decided are left to the
// next run, which restores from the store and re-reads the commands from
// the checkpoint that committed with the state. These tests check that
// while the disk fails no signal of a user who left is forwarded, that the
// processor halts saying where and what, and that once the fault clears a
// restart on the same data loses nothing and leaks nothing: every signal
// comes out once or not at all as the rules say, judged here from the
// rules, and every user's record equals that of a run that met no fault.

// diskFault is a fault of the store's disk, set and cleared by the test.
type diskFault struct {
	name   string
	match  func(errorfs.Op) bool
	sticky bool // every matching op fails from the first on (a full disk)
	err    error
}

func fileOp(kinds ...errorfs.OpKind) func(errorfs.Op) bool {
	return func(op errorfs.Op) bool { return slices.Contains(kinds, op.Kind) }
}

var diskFaults = []diskFault{
	{name: "write", match: fileOp(errorfs.OpFileWrite, errorfs.OpFileWriteAt), err: errorfs.ErrInjected},
	{name: "sync", match: fileOp(errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo), err: errorfs.ErrInjected},
	{name: "read", match: fileOp(errorfs.OpFileRead, errorfs.OpFileReadAt), err: errorfs.ErrInjected},
	{name: "enospc", sticky: true, err: syscall.ENOSPC, match: fileOp(errorfs.OpCreate, errorfs.OpFileWrite,
		errorfs.OpFileWriteAt, errorfs.OpFilePreallocate, errorfs.OpFileSync, errorfs.OpFileSyncData, errorfs.OpFileSyncTo)},
}

// disk is an errorfs injector that fails the matching op number at after
// it is armed (and every later one when the fault is sticky), with an
// *fs.PathError as the operating system gives.
type disk struct {
	fault diskFault
	mu    sync.Mutex
	armed bool
	at    int
	seen  int
	hits  []string // the ops it failed, "op path"
}

func (d *disk) String() string { return "disk fault " + d.fault.name }

// arm starts failing matching op number at; at -1 only counts them.
func (d *disk) arm(at int) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.armed, d.at, d.seen, d.hits = true, at, 0, nil
}

// clear heals the disk and returns the ops it failed.
func (d *disk) clear() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.armed = false
	return d.hits
}

// count returns how many matching ops it saw since armed.
func (d *disk) count() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.seen
}

func (d *disk) failed() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return slices.Clone(d.hits)
}

func (d *disk) MaybeError(op errorfs.Op) error {
	if !d.fault.match(op) {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if !d.armed {
		return nil
	}
	i := d.seen
	d.seen++
	if d.at < 0 || i < d.at || (i > d.at && !d.fault.sticky) {
		return nil
	}
	name := map[errorfs.OpKind]string{errorfs.OpFileRead: "read", errorfs.OpFileReadAt: "pread", errorfs.OpCreate: "open",
		errorfs.OpFilePreallocate: "fallocate", errorfs.OpFileWriteAt: "pwrite"}[op.Kind]
	if name == "" {
		name = d.fault.name
		if d.fault.sticky {
			name = "write"
		}
	}
	d.hits = append(d.hits, name+" "+op.Path)
	return &fs.PathError{Op: name, Path: op.Path, Err: d.fault.err}
}

// storageSeed is the run's seed: COHORTGATE_FAULT_SEED, or the clock.
func storageSeed(t *testing.T) uint64 {
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

// storeDir is the store's directory on the test's in-memory file system.
const storeDir = "data/membership"

// openStore opens the store on fs with a cache too small to keep its
// tables, so that applying a command reads the disk.
func openStore(t *testing.T, fs vfs.FS) (*membership.Store, error) {
	t.Helper()
	return membership.Open(storeDir, &membership.Options{FS: fs, CacheSize: 1 << 10})
}

// storageRun is the input a storage fault test produces and what the
// rules make of it, kept by the test, not read from the processor.
type storageRun struct {
	e       *env
	forward map[string]bool // signal value → must be forwarded
	users   []uint64
}

// start opens the store on fs and runs a processor on it until it is
// ready on both partitions.
func (r *storageRun) start(t *testing.T, fs vfs.FS, cfg fanout.Config) *proc {
	t.Helper()
	store, err := openStore(t, fs)
	if err != nil {
		t.Fatal(err)
	}
	pr := r.e.startOn(store, cfg)
	pr.waitReady(t, 2)
	return pr
}

func (r *storageRun) signal(user uint64, ts time.Time, forward bool) {
	ts = ts.Truncate(time.Millisecond) // what the record carries
	v := fmt.Sprintf("u%d@%d", user, ts.UnixNano())
	r.e.signal(user, ts, v)
	r.forward[v] = forward
}

// judge reads the cohort topic and checks every signal against the rules:
// each one that must be forwarded is there once, no other is there.
func (r *storageRun) judge(t *testing.T) {
	t.Helper()
	seen := make(map[string]int)
	for _, rec := range r.e.readAll(r.e.set.Cohort) {
		seen[string(rec.Value)]++
	}
	var leaked, lost, dup, unknown []string
	for v, n := range seen {
		want, ok := r.forward[v]
		switch {
		case !ok:
			unknown = append(unknown, v)
		case !want:
			leaked = append(leaked, v)
		case n > 1:
			dup = append(dup, v)
		}
	}
	for v, want := range r.forward {
		if want && seen[v] == 0 {
			lost = append(lost, v)
		}
	}
	if len(leaked)+len(lost)+len(dup)+len(unknown) > 0 {
		t.Fatalf("cohort topic: leaked %v, lost %v, duplicated %v, unknown %v", leaked, lost, dup, unknown)
	}
}

// sameState checks that every user's record of pr equals that of a run of
// a processor with a fresh store and its own group and outputs over the
// same input, which met no fault. Receipts say when a command took effect
// in a run, so they differ; so may whether the last command changed the
// record or came again as a duplicate (a restart applies again, as
// duplicates, commands whose changelog records it cannot know were
// written), so its identity is compared and not those flags.
func (r *storageRun) sameState(t *testing.T, pr *proc) {
	t.Helper()
	cfg := r.e.config()
	cfg.Group = r.e.group + "-clean"
	cfg.Topics.Cohort = topics.Topic(string(r.e.set.Cohort) + "-clean")
	cfg.Topics.DLQ = topics.Topic(string(r.e.set.DLQ) + "-clean")
	cfg.Topics.Changelog = topics.Topic(string(r.e.set.Changelog) + "-clean")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, _ = r.e.adm.DeleteTopics(ctx, string(cfg.Topics.Cohort), string(cfg.Topics.DLQ), string(cfg.Topics.Changelog))
		_, _ = r.e.adm.DeleteGroup(ctx, cfg.Group)
	})
	store, err := openStore(t, vfs.NewMem())
	if err != nil {
		t.Fatal(err)
	}
	clean := r.e.startOn(store, cfg)
	r.e.waitDecidedBy(cfg.Group)
	for _, u := range r.users {
		got, err := pr.Member(u)
		if err != nil {
			t.Fatal(err)
		}
		want, err := clean.Member(u)
		if err != nil {
			t.Fatal(err)
		}
		got.Receipt, want.Receipt = nil, nil
		for _, c := range []*topics.CommandRef{got.Command, want.Command} {
			if c != nil {
				c.Changed, c.Duplicate = false, false
			}
		}
		if a, b := string(topics.AppendMemberRecord(nil, got)), string(topics.AppendMemberRecord(nil, want)); a != b {
			t.Fatalf("user %d after the fault and a restart:\n%s\nwithout a fault:\n%s", u, a, b)
		}
	}
}

// checkHalt waits for pr to halt and checks that its error is the store's,
// naming its directory, what the store was doing, and the file system's
// error (the file and the system call).
func checkHalt(t *testing.T, pr *proc, d *disk) error {
	t.Helper()
	var err error
	select {
	case err = <-pr.done:
		pr.done <- err
	case <-time.After(60 * time.Second):
		t.Fatalf("processor still running 60s after the %s fault at %v", d.fault.name, d.failed())
	}
	var se *membership.StorageError
	var pe *fs.PathError
	switch {
	case !errors.As(err, &se) || !errors.As(err, &pe) || !errors.Is(err, d.fault.err):
		t.Fatalf("Run = %v, want the store's error with the injected %v (failed %v)", err, d.fault.err, d.failed())
	case se.Dir != storeDir || !strings.Contains(err.Error(), storeDir) || !strings.Contains(err.Error(), se.Op) ||
		!strings.Contains(err.Error(), pe.Op+" "+pe.Path):
		t.Fatalf("Run = %v: does not say where (%s) and what (%s, %s %s)", err, storeDir, se.Op, pe.Op, pe.Path)
	}
	if ok, why := pr.Ready(); ok || !strings.HasPrefix(why, "halted: ") {
		t.Fatalf("Ready() = %v, %q once halted; want not ready, saying it halted", ok, why)
	}
	t.Logf("halted: %v", err)
	return err
}

// TestStorageFaultWhileApplying applies leaves while the store's disk
// fails (a write, a sync, a read, or a full disk, at a seeded random
// point), with signals of the leaving users and of others in flight. The
// processor must halt with the store's error and forward no signal of a
// user who left; after the fault clears, a restart on the same data must
// forward every other signal once and hold what a run without a fault
// holds.
func TestStorageFaultWhileApplying(t *testing.T) {
	seed := storageSeed(t)
	for i, fault := range diskFaults {
		t.Run(fault.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(seed, uint64(i)))
			storageFaultWhileApplying(t, fault, rng)
		})
	}
}

func storageFaultWhileApplying(t *testing.T, fault diskFault, rng *rand.Rand) {
	e := newEnv(t, 2)
	mem := vfs.NewMem()
	d := &disk{fault: fault}
	efs := errorfs.Wrap(mem, d)
	run := &storageRun{e: e, forward: make(map[string]bool)}
	const users = 12
	for u := uint64(1); u <= users; u++ {
		run.users = append(run.users, u)
	}
	cfg := e.config()
	start := func() *proc { return run.start(t, efs, cfg) }

	// Before the fault: users 9 to 12 left and came back, so that the
	// store has records to read, then every user has a signal forwarded.
	// The signals follow the rejoins: a signal forwarded before a late
	// leave is applied gets a late-leave window when the leave and its
	// rejoin are applied in different batches, and none when in one, so
	// that this run and the run without a fault it is compared with
	// (sameState) would differ by timing alone.
	pr := start()
	for u := uint64(9); u <= users; u++ {
		e.command(topics.Leave, u, time.Now().Add(-time.Hour))
		e.command(topics.Rejoin, u, time.Now().Add(-time.Hour/2))
	}
	waitApplied(t, "active", 1, []uint64{9, 10, 11, 12}, pr)
	for _, u := range run.users {
		run.signal(u, time.Now(), true)
	}
	e.waitDecided()
	if fault.name == "read" {
		// What the processor wrote is in memory until a restart makes
		// Pebble flush it to a table: restart, so that reads hit the disk.
		if err := pr.stop(t); err != nil {
			t.Fatal(err)
		}
		pr = start()
	}

	// The fault, somewhere in the leaves of users 1 to 6, each followed by
	// a signal of the user (after the leave: never forwarded) and one of a
	// user who stays. Record timestamps are in ms: the signal is a
	// millisecond after the boundary.
	leave := func(u uint64) {
		at := time.Now().Truncate(time.Millisecond)
		e.command(topics.Leave, u, at)
		run.signal(u, at.Add(time.Millisecond), false)
	}
	at := rng.IntN(6)
	d.arm(at)
	for u := uint64(1); u <= 6; u++ {
		ops := d.count()
		leave(u)
		run.signal(u+6, time.Now(), true)
		// A leave is in force once its batch is applied, before Pebble's
		// write-ahead log is written (and synced). Waiting for the leave's
		// own ops keeps the next leave's batch out of the same log write:
		// on a slow disk one write took the batches of five leaves, and a
		// fault at the sixth op was never hit.
		eventually(t, 30*time.Second, func() error {
			if len(d.failed()) > 0 {
				return nil
			}
			m, err := pr.Member(u)
			if err != nil || m.Status != "left" {
				return fmt.Errorf("leave of user %d not applied: %+v %v", u, m, err)
			}
			if d.count() == ops {
				return fmt.Errorf("leave of user %d applied but made no %s op yet", u, fault.name)
			}
			return nil
		})
		if len(d.failed()) > 0 {
			break
		}
	}
	if len(d.failed()) == 0 { // six leaves made six ops at least
		t.Fatalf("the %s fault at %d not hit: the leaves made %d matching ops", fault.name, at, d.count())
	}
	for u := uint64(1); u <= 6; u++ { // whatever the fault left undone: the rest of the leaves
		if m, err := pr.Member(u); err != nil || m.Status != "left" {
			leave(u)
		}
	}
	checkHalt(t, pr, d)
	failed := d.clear()
	t.Logf("%s fault at op %d failed %v", fault.name, at, failed)
	_ = pr.stop(t) // the failed store's Close reports the failure again

	// The fault cleared: a restart on the same data.
	pr = start()
	e.waitDecided()
	run.judge(t)
	run.sameState(t, pr)
}

// backgroundFailure is a store that fails as one does when a background
// job of Pebble's meets a fault (pkg/membership's
// TestFaultManifestInBackground makes a real one): no call meets it, but
// Failed is closed and Err names the store, the file and the fault.
type backgroundFailure struct {
	*membership.Store
	down chan struct{}
	err  error
}

func (b *backgroundFailure) Failed() <-chan struct{} { return b.down }
func (b *backgroundFailure) Err() error              { return b.err }

// TestStorageFailsInTheBackground: a store that fails in one of Pebble's
// background jobs halts the processor at once with the store's error,
// though no command comes for a call of the store to meet it. Before, the
// processor went on forwarding over a store that could no longer write.
func TestStorageFailsInTheBackground(t *testing.T) {
	e := newEnv(t, 2)
	store, err := openStore(t, vfs.NewMem())
	if err != nil {
		t.Fatal(err)
	}
	pe := &fs.PathError{Op: "write", Path: storeDir + "/MANIFEST-000001", Err: errorfs.ErrInjected}
	failing := &backgroundFailure{Store: store, down: make(chan struct{}),
		err: &membership.StorageError{Dir: storeDir, Op: "run", Err: errors.Join(membership.ErrFailed, pe)}}
	pr := e.startThrough(failing, store, e.config())
	pr.waitReady(t, 2)
	e.signal(1, time.Now(), "before")
	e.waitDecided()

	close(failing.down)
	checkHalt(t, pr, &disk{fault: diskFaults[0]})
}

// TestStorageFaultWhileRestoring fails a read of the store's disk at a
// seeded random point of what the processor reads at start (opening the
// store, restoring the gate, loading the outbox, the checkpoints), with
// signals of users who left waiting on the input. The processor must not
// forward anything unless its store restored in full: Open fails, or Run
// returns the store's error before it consumes anything, or the fault hit
// a read whose failure Pebble absorbs. After the fault clears a restart
// forwards what the rules allow and holds what a run without a fault
// holds.
//
// Writes, syncs and a full disk at start are tested on the store alone
// (pkg/membership, TestFaultRestoring): some of them fail in a background
// flush that Pebble cannot go on from, which fails the store (it used to
// end the process), and TestStorageFailsInTheBackground shows what the
// processor does then.
func TestStorageFaultWhileRestoring(t *testing.T) {
	seed := storageSeed(t)
	rng := rand.New(rand.NewPCG(seed, 100))
	e := newEnv(t, 2)
	d := &disk{fault: diskFaults[2]} // read
	efs := errorfs.Wrap(vfs.NewMem(), d)
	run := &storageRun{e: e, forward: make(map[string]bool), users: []uint64{1, 2, 3, 4, 5, 6}}
	cfg := e.config()
	start := func() *proc { return run.start(t, efs, cfg) }

	pr := start()
	for u := uint64(1); u <= 3; u++ {
		e.command(topics.Leave, u, time.Now())
	}
	waitApplied(t, "left", 0, []uint64{1, 2, 3}, pr)
	if err := pr.stop(t); err != nil {
		t.Fatal(err)
	}
	// Once more, so that the records are in a table (Pebble flushes what
	// it finds in its log when it opens), and count what a start reads.
	d.arm(-1)
	pr = start()
	if err := pr.stop(t); err != nil {
		t.Fatal(err)
	}
	total := d.count()
	d.clear()
	for _, u := range run.users {
		run.signal(u, time.Now().Add(time.Millisecond), u > 3) // after the leaves, in ms
	}

	at := rng.IntN(total)
	d.arm(at)
	outcome := "absorbed"
	if store, err := openStore(t, efs); err != nil {
		var se *membership.StorageError
		if !errors.As(err, &se) || se.Dir != storeDir || !errors.Is(err, errorfs.ErrInjected) ||
			!strings.Contains(err.Error(), storeDir) {
			t.Fatalf("Open with a read failing = %v, want the store's error naming %s", err, storeDir)
		}
		outcome = "open failed: " + err.Error()
	} else {
		pr := e.startOn(store, cfg)
		eventually(t, 60*time.Second, func() error {
			select {
			case err := <-pr.done:
				pr.done <- err
				checkHalt(t, pr, d)
				outcome = "halted: " + err.Error()
				return nil
			default:
			}
			if ok, why := pr.Ready(); !ok {
				return errors.New(why)
			}
			return nil
		})
		if err := pr.stop(t); err != nil && outcome == "absorbed" {
			t.Fatalf("the processor ran, then stopped with %v", err)
		}
	}
	failed := d.clear()
	t.Logf("read fault at %d of %d reads failed %v: %s", at, total, failed, outcome)
	if outcome != "absorbed" {
		if got := e.readAll(e.set.Cohort); len(got) != 0 {
			t.Fatalf("%d signals forwarded by a processor whose store could not be restored", len(got))
		}
	}

	pr = start()
	e.waitDecided()
	run.judge(t)
	run.sameState(t, pr)
}

// mountTmpfs mounts a tmpfs of size bytes in a new temporary directory and
// unmounts it when the test ends; it skips the test where mounting is not
// allowed.
func mountTmpfs(t *testing.T, size int) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+strconv.Itoa(size)); err != nil {
		t.Skipf("a full file system needs a tmpfs of its own, and mounting one is not allowed here: %v", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// fill writes a file in dir until the file system is full, and returns its
// name.
func fill(t *testing.T, dir string) string {
	t.Helper()
	name := dir + "/filler"
	f, err := os.Create(name)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	block := make([]byte, 64<<10)
	for i := 0; ; i++ {
		if i > 1<<14 {
			t.Fatalf("%s: written %d blocks and not full", dir, i)
		}
		if _, err := f.Write(block); errors.Is(err, syscall.ENOSPC) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
	}
	for len(block) > 1 { // the last pages
		if _, err := f.Write(block); err != nil {
			block = block[:len(block)/2]
		}
	}
	return name
}

// TestStorageFullDisk runs the processor with its data dir on a tmpfs of
// its own and fills the file system, first under a running processor that
// applies leaves, then before it starts again, and checks the outcome the
// injected faults have: no signal of a user who left is forwarded, a store
// that cannot write stops the processor (or keeps it from starting) with
// an error naming the directory and the full disk, and once space is freed
// a restart on the same data loses nothing and leaks nothing.
//
// A running store keeps committing on a full disk for a while: Pebble
// reserves its log's space (4.4 MB) when it starts one, and only a flush
// of a full memtable needs more; so the first phase usually ends with the
// leaves applied, which the test accepts and logs.
func TestStorageFullDisk(t *testing.T) {
	if testing.Short() {
		t.Skip("mounts a file system; not in -short")
	}
	mnt := mountTmpfs(t, 8<<20)
	dir := mnt + "/membership"
	e := newEnv(t, 2)
	run := &storageRun{e: e, forward: make(map[string]bool)}
	for u := uint64(1); u <= 12; u++ {
		run.users = append(run.users, u)
	}
	cfg := e.config()
	open := func() (*membership.Store, error) {
		return membership.Open(dir, &membership.Options{BackgroundFailureTimeout: 2 * time.Second})
	}
	checkFull := func(err error) {
		t.Helper()
		var se *membership.StorageError
		if !errors.As(err, &se) || se.Dir != dir || !errors.Is(err, syscall.ENOSPC) || !strings.Contains(err.Error(), dir) {
			t.Fatalf("on a full disk: %v, want the store's error naming %s and ENOSPC", err, dir)
		}
		t.Logf("on a full disk: %v", err)
	}
	leave := func(u uint64) {
		at := time.Now().Truncate(time.Millisecond)
		e.command(topics.Leave, u, at)
		run.signal(u, at.Add(time.Millisecond), false)
		run.signal(u+6, time.Now(), true)
	}

	store, err := open()
	if err != nil {
		t.Fatal(err)
	}
	pr := e.startOn(store, cfg)
	pr.waitReady(t, 2)
	for _, u := range run.users {
		run.signal(u, time.Now(), true)
	}
	for u := uint64(9); u <= 12; u++ {
		e.command(topics.Leave, u, time.Now().Add(-time.Hour))
		e.command(topics.Rejoin, u, time.Now().Add(-time.Hour/2))
	}
	waitApplied(t, "active", 1, []uint64{9, 10, 11, 12}, pr)
	e.waitDecided()

	// The disk fills under the running processor.
	filler := fill(t, mnt)
	for u := uint64(1); u <= 3; u++ {
		leave(u)
	}
	eventually(t, 60*time.Second, func() error {
		select {
		case err := <-pr.done:
			pr.done <- err
			checkFull(err)
			return nil
		default:
		}
		for u := uint64(1); u <= 3; u++ {
			if m, err := pr.Member(u); err != nil || m.Status != "left" {
				return fmt.Errorf("user %d: neither applied nor halted: %+v %v", u, m, err)
			}
		}
		t.Log("leaves applied on the full disk: the store's log had its space reserved")
		return nil
	})
	_ = pr.stop(t)

	// A start on the full disk.
	for u := uint64(4); u <= 6; u++ {
		leave(u)
	}
	if store, err := open(); err != nil {
		checkFull(err)
	} else {
		pr := e.startOn(store, cfg)
		select {
		case err := <-pr.done:
			pr.done <- err
			checkFull(err)
		case <-time.After(60 * time.Second):
			t.Fatal("processor still running 60s after it started on a full disk")
		}
		_ = pr.stop(t)
	}

	// Space freed: a restart on the same data. A store that gave up
	// opening lets Pebble finish in the background, then closes it.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, func() error {
		store, err = open()
		return err
	})
	pr = e.startOn(store, cfg)
	e.waitDecided()
	run.judge(t)
	run.sameState(t, pr)
}
