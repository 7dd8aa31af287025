package membership

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// holdingFS holds every sync of a write-ahead log file while held is set:
// each sync that starts then sends on entered and waits for release; a set
// fail makes the syncs fail instead.
type holdingFS struct {
	vfs.FS
	mu      sync.Mutex
	held    bool
	fail    error
	entered chan struct{}
	release chan struct{}
}

func newHoldingFS() *holdingFS {
	return &holdingFS{FS: vfs.NewMem(), entered: make(chan struct{}, 16), release: make(chan struct{})}
}

func (fs *holdingFS) hold() {
	fs.mu.Lock()
	fs.held = true
	fs.mu.Unlock()
}

// sync runs before every sync of a log file.
func (fs *holdingFS) sync() error {
	fs.mu.Lock()
	held, fail := fs.held, fs.fail
	fs.mu.Unlock()
	if fail != nil {
		return fail
	}
	if held {
		fs.entered <- struct{}{}
		<-fs.release
	}
	return nil
}

func (fs *holdingFS) wrap(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil || !strings.HasSuffix(name, ".log") {
		return f, err
	}
	return &holdingFile{File: f, fs: fs}, nil
}

func (fs *holdingFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, c)
	return fs.wrap(name, f, err)
}

func (fs *holdingFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(oldname, newname, c)
	return fs.wrap(newname, f, err)
}

func (fs *holdingFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := fs.FS.OpenReadWrite(name, c, opts...)
	return fs.wrap(name, f, err)
}

type holdingFile struct {
	vfs.File
	fs *holdingFS
}

func (f *holdingFile) Sync() error {
	if err := f.fs.sync(); err != nil {
		return err
	}
	return f.File.Sync()
}

func (f *holdingFile) SyncData() error {
	if err := f.fs.sync(); err != nil {
		return err
	}
	return f.File.SyncData()
}

func (f *holdingFile) SyncTo(length int64) (bool, error) {
	if err := f.fs.sync(); err != nil {
		return false, err
	}
	return f.File.SyncTo(length)
}

// TestCommitNoSyncWait: the batch is visible, to reads and to the next
// batch, while its sync is held, and Wait returns only once the sync is
// over.
func TestCommitNoSyncWait(t *testing.T) {
	fs := newHoldingFS()
	s := openFS(t, fs, nil)
	fs.hold()
	b := s.NewBatch()
	if _, err := b.Leave(1, 100); err != nil {
		t.Fatal(err)
	}
	if err := b.SetCheckpoint("commands", 0, 7); err != nil {
		t.Fatal(err)
	}
	syncing, err := b.CommitNoSyncWait()
	if err != nil {
		t.Fatal(err)
	}
	if m, err := s.Member(1); err != nil || m.Status != Left {
		t.Fatalf("before the sync: member %+v, %v; want left", m, err)
	}
	if next, ok, err := s.Checkpoint("commands", 0); err != nil || !ok || next != 7 {
		t.Fatalf("before the sync: checkpoint %d %v %v; want 7", next, ok, err)
	}
	next := s.NewBatch() // the user is not claimed any more, and reads the left state
	if ch, err := next.Rejoin(1, 200); err != nil || !ch.Changed {
		t.Fatalf("the next batch's rejoin: %+v, %v", ch, err)
	}
	next.Close()

	done := make(chan error, 1)
	go func() { done <- syncing.Wait() }()
	select {
	case <-fs.entered:
	case <-time.After(10 * time.Second):
		t.Fatal("no sync of the write-ahead log started")
	}
	select {
	case err := <-done:
		t.Fatalf("Wait returned %v while the sync was held", err)
	default:
	}
	close(fs.release)
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Wait: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Wait did not return once the sync was over")
	}
	if err := syncing.Wait(); err != nil {
		t.Fatalf("second Wait: %v", err)
	}
}

// TestCommitNoSyncWaitSyncFails: a failed sync is Wait's error, a
// *StorageError wrapping ErrFailed, and the store takes no more commits.
func TestCommitNoSyncWaitSyncFails(t *testing.T) {
	fs := newHoldingFS()
	s, err := Open("db", &Options{FS: fs})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close() // fails: the store failed
	boom := errors.New("injected: input/output error")
	fs.mu.Lock()
	fs.fail = boom
	fs.mu.Unlock()
	b := s.NewBatch()
	if _, err := b.Leave(1, 100); err != nil {
		t.Fatal(err)
	}
	syncing, err := b.CommitNoSyncWait()
	if err == nil {
		err = syncing.Wait()
	}
	t.Log(err)
	var se *StorageError
	if !errors.As(err, &se) || !errors.Is(err, ErrFailed) || !errors.Is(err, boom) {
		t.Fatalf("commit with a failing sync: %v; want a *StorageError wrapping ErrFailed and the cause", err)
	}
	next := s.NewBatch()
	defer next.Close()
	if _, err := next.Leave(2, 100); err == nil {
		if err = next.Commit(); !errors.Is(err, ErrFailed) {
			t.Fatalf("commit after the failed sync: %v, want ErrFailed", err)
		}
	}
}
