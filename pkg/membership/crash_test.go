package membership

import (
	"bytes"
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// crash returns the file system as it would be found after a crash at this
// moment in which nothing unsynced survived.
func crash(fs *vfs.MemFS) *vfs.MemFS {
	return fs.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: 0})
}

// TestCrashKeepsSyncedLeave: a Leave that returned nil survives a crash.
func TestCrashKeepsSyncedLeave(t *testing.T) {
	fs := vfs.NewCrashableMem()
	s := openFS(t, fs, nil)
	mustOK(t)(s.Leave(1, 100))
	mustOK(t)(s.Leave(2, 100))
	mustOK(t)(s.Rejoin(2, 200))

	after := openFS(t, crash(fs), nil)
	checkMembers(t, after, []Member{
		member(1, Left, 100),
		member(2, Active, 0, Episode{100, 200}),
	})
}

// TestCrashNoSyncLosesLeave is the control for TestCrashKeepsSyncedLeave: the
// same test with syncing off must lose the write, which shows that the crash
// is real and the test above can fail.
func TestCrashNoSyncLosesLeave(t *testing.T) {
	fs := vfs.NewCrashableMem()
	s := openFS(t, fs, &Options{NoSync: true})
	mustOK(t)(s.Leave(1, 100))
	if st, err := s.Status(1); err != nil || st.Status != Left {
		t.Fatalf("before the crash: %+v, %v", st, err)
	}

	after := openFS(t, crash(fs), nil)
	checkMembers(t, after, []Member{member(1, Active, 0)})
}

// TestCrashBatchAllOrNothing: a crash before Commit keeps none of a batch, a
// crash after Commit keeps all of it: commands, late leaves, notes, outbox
// entries and checkpoint.
func TestCrashBatchAllOrNothing(t *testing.T) {
	const users = 500
	fs := vfs.NewCrashableMem()
	s := openFS(t, fs, nil)
	mustOK(t)(s.Leave(users, 1))        // committed before the batch
	addOutbox(t, s, "before the batch") // entry 1

	b := s.NewBatch()
	defer b.Close()
	cb := fillCrashBatch(t, b, users)

	cb.check(t, openFS(t, crash(fs), nil), false)
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	after := crash(fs)
	s = openFS(t, after, nil)
	cb.check(t, s, true)

	// The outbox high-water mark survived too: after the crash, with every
	// entry deleted and the store reopened, numbers go on above the batch's.
	if err := s.DeleteOutbox(math.MaxUint64); err != nil {
		t.Fatal(err)
	}
	s = reopen(t, s, after)
	if seq := addOutbox(t, s, "after")[0]; seq <= cb.outbox[len(cb.outbox)-1] {
		t.Fatalf("seq after the crash = %d, not above the batch's %v", seq, cb.outbox)
	}
}

// TestCrashUndoesDeleteOutbox pins what the package documents: DeleteOutbox
// is not synced, so a crash right after it brings the entries back, intact,
// to be delivered again; the next synced commit makes it durable.
func TestCrashUndoesDeleteOutbox(t *testing.T) {
	fs := vfs.NewCrashableMem()
	s := openFS(t, fs, nil)
	addOutbox(t, s, "a", "b")
	if err := s.DeleteOutbox(2); err != nil {
		t.Fatal(err)
	}
	if got := outboxOf(t, openFS(t, crash(fs), nil)); !slices.Equal(got, []outboxEntry{{1, "a"}, {2, "b"}}) {
		t.Fatalf("Outbox after a crash right after DeleteOutbox = %v, want both entries back", got)
	}
	mustOK(t)(s.Leave(1, 1)) // synced: the log up to here is on disk
	if got := outboxOf(t, openFS(t, crash(fs), nil)); len(got) != 0 {
		t.Fatalf("Outbox after a synced commit and a crash = %v, want none", got)
	}
}

// crashBatch is the batch of the crash tests, staged by fillCrashBatch.
type crashBatch struct {
	users  uint64
	outbox []uint64 // the numbers its outbox entries got, ascending
}

// fillCrashBatch stages a leave of every user, a rejoin of every other one,
// a late-leave window and a note on every tenth, three outbox entries of 2 KB
// and a checkpoint.
func fillCrashBatch(t *testing.T, b *Batch, users uint64) crashBatch {
	t.Helper()
	cb := crashBatch{users: users}
	for u := range users {
		mustOK(t)(b.Leave(u, 100+u))
		if u%10 == 0 {
			if err := b.RecordLateLeave(u, LateLeave{LeftAtNs: 100 + u, ForwardedThroughNs: 150 + u}); err != nil {
				t.Fatal(err)
			}
			if err := b.SetNote(u, crashNote(u)); err != nil {
				t.Fatal(err)
			}
		}
		if u%2 == 0 {
			mustOK(t)(b.Rejoin(u, 1000+u))
		}
	}
	for i := range 3 {
		seq, err := b.AddOutbox(crashOutboxValue(i))
		if err != nil {
			t.Fatal(err)
		}
		cb.outbox = append(cb.outbox, seq)
	}
	if err := b.SetCheckpoint("commands", 7, 501); err != nil {
		t.Fatal(err)
	}
	return cb
}

func crashNote(u uint64) []byte { return fmt.Appendf(nil, "note of %d", u) }

func crashOutboxValue(i int) []byte { return bytes.Repeat([]byte{byte('a' + i)}, 2000) }

// check checks that the batch is in s in full if committed, or not at all.
func (cb crashBatch) check(t *testing.T, s *Store, committed bool) {
	t.Helper()
	next, ok, err := s.Checkpoint("commands", 7)
	if err != nil {
		t.Fatal(err)
	}
	if ok != committed || (ok && next != 501) {
		t.Fatalf("checkpoint = %d, %v; want committed %v", next, ok, committed)
	}
	for u := range cb.users {
		want := member(u, Active, 0)
		switch {
		case committed && u%2 == 0:
			want = member(u, Active, 0, Episode{100 + u, 1000 + u})
		case committed:
			want = member(u, Left, 100+u)
		}
		if committed && u%10 == 0 {
			want.LateLeaves = []LateLeave{{LeftAtNs: 100 + u, ForwardedThroughNs: 150 + u}}
			want.Note = crashNote(u)
		}
		got, err := s.Member(u)
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("user %d = %+v, want %+v (committed %v)", u, got, want, committed)
		}
	}
	var found int
	if err := s.Outbox(func(seq uint64, value []byte) error {
		i := slices.Index(cb.outbox, seq)
		if i < 0 {
			return nil // not the batch's
		}
		if !committed || !bytes.Equal(value, crashOutboxValue(i)) {
			return fmt.Errorf("outbox entry %d of %d bytes (committed %v)", seq, len(value), committed)
		}
		found++
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if committed && found != len(cb.outbox) {
		t.Fatalf("%d of the batch's %d outbox entries survived", found, len(cb.outbox))
	}
}

// TestCrashTornBatch commits a batch whose write-ahead log sync is a lie, so
// its bytes are in the log file but not synced, then crashes keeping random
// 4 KB blocks of the unsynced data, from none to all of them: whatever
// survives, the batch is there in full or not at all.
func TestCrashTornBatch(t *testing.T) {
	const users = 500 // about 30 KB of log: several blocks to tear
	mem := vfs.NewCrashableMem()
	fs := &lyingFS{FS: mem}
	s := openFS(t, fs, nil)
	fs.lie.Store(true)
	b := s.NewBatch()
	defer b.Close()
	cb := fillCrashBatch(t, b, users)
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	var kept, lost int
	const crashes = 40
	for seed := range uint64(crashes) {
		pct := int(seed * 100 / (crashes - 1))
		clone := mem.CrashClone(vfs.CrashCloneCfg{UnsyncedDataPercent: pct, RNG: rand.New(rand.NewPCG(seed, 0))})
		after := openFS(t, clone, nil)
		_, ok, err := after.Checkpoint("commands", 7)
		if err != nil {
			t.Fatal(err)
		}
		cb.check(t, after, ok)
		if ok {
			kept++
		} else {
			lost++
		}
		if err := after.Close(); err != nil {
			t.Fatal(err)
		}
	}
	// Both outcomes must occur, or nothing was torn and the test proves
	// nothing.
	if kept == 0 || lost == 0 {
		t.Fatalf("of %d crashes, %d kept the batch and %d lost it; want some of each", crashes, kept, lost)
	}
	t.Logf("of %d crashes, %d kept the batch and %d lost it", crashes, kept, lost)
}

// lyingFS makes the syncs of write-ahead log files do nothing while lie is
// set, like a disk that acknowledges writes it has only cached.
type lyingFS struct {
	vfs.FS
	lie atomic.Bool
}

func (fs *lyingFS) wrap(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil || !strings.HasSuffix(name, ".log") {
		return f, err
	}
	return &lyingFile{File: f, lie: &fs.lie}, nil
}

func (fs *lyingFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, c)
	return fs.wrap(name, f, err)
}

func (fs *lyingFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(oldname, newname, c)
	return fs.wrap(newname, f, err)
}

func (fs *lyingFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := fs.FS.OpenReadWrite(name, c, opts...)
	return fs.wrap(name, f, err)
}

type lyingFile struct {
	vfs.File
	lie *atomic.Bool
}

func (f *lyingFile) Sync() error {
	if f.lie.Load() {
		return nil
	}
	return f.File.Sync()
}

func (f *lyingFile) SyncData() error {
	if f.lie.Load() {
		return nil
	}
	return f.File.SyncData()
}

func (f *lyingFile) SyncTo(length int64) (bool, error) {
	if f.lie.Load() {
		return true, nil
	}
	return f.File.SyncTo(length)
}
