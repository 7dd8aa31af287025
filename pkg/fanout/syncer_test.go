package fanout

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/pkg/membership"
)

// heldSyncFS holds every sync of a write-ahead log file from hold on: a
// sync that starts sends on entered, then waits for release to be closed.
type heldSyncFS struct {
	vfs.FS
	mu      sync.Mutex
	held    bool
	entered chan struct{}
	release chan struct{}
}

func (fs *heldSyncFS) hold() {
	fs.mu.Lock()
	fs.held = true
	fs.mu.Unlock()
}

func (fs *heldSyncFS) sync() {
	fs.mu.Lock()
	held := fs.held
	fs.mu.Unlock()
	if held {
		select {
		case fs.entered <- struct{}{}:
		default:
		}
		<-fs.release
	}
}

func (fs *heldSyncFS) wrap(name string, f vfs.File, err error) (vfs.File, error) {
	if err != nil || !strings.HasSuffix(name, ".log") {
		return f, err
	}
	return &heldSyncFile{File: f, fs: fs}, nil
}

func (fs *heldSyncFS) Create(name string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.Create(name, c)
	return fs.wrap(name, f, err)
}

func (fs *heldSyncFS) ReuseForWrite(oldname, newname string, c vfs.DiskWriteCategory) (vfs.File, error) {
	f, err := fs.FS.ReuseForWrite(oldname, newname, c)
	return fs.wrap(newname, f, err)
}

func (fs *heldSyncFS) OpenReadWrite(name string, c vfs.DiskWriteCategory, opts ...vfs.OpenOption) (vfs.File, error) {
	f, err := fs.FS.OpenReadWrite(name, c, opts...)
	return fs.wrap(name, f, err)
}

type heldSyncFile struct {
	vfs.File
	fs *heldSyncFS
}

func (f *heldSyncFile) Sync() error                       { f.fs.sync(); return f.File.Sync() }
func (f *heldSyncFile) SyncData() error                   { f.fs.sync(); return f.File.SyncData() }
func (f *heldSyncFile) SyncTo(length int64) (bool, error) { f.fs.sync(); return f.File.SyncTo(length) }

// TestLeaveClosesGateBeforeEarlierSync: while one batch's sync is under
// way, the next leave is applied and closes the gate (the applier does not
// wait for the sync), but neither batch is published (no outbox record, no
// applied offset that would release held signals) before the sync; once it
// is over both are, in order.
func TestLeaveClosesGateBeforeEarlierSync(t *testing.T) {
	fs := &heldSyncFS{FS: vfs.NewMem(), entered: make(chan struct{}, 1), release: make(chan struct{})}
	st := newCommandsStateOn(t, nil, "db", &membership.Options{FS: fs})
	defer st.store.Close()
	c := newClaim(0, 1, 0, 0)
	c.recovery.done = true
	st.a.claims.put(c)
	failed := make(chan error, 1)
	stop := st.a.startSyncer(func(err error) { failed <- err })

	// leave applies one leave, failing the test if that takes more than a
	// few seconds: it must not wait for a sync.
	leave := func(offset int64, user uint64) {
		t.Helper()
		done := make(chan error, 1)
		ms := 1_000_000 + offset
		r := &kgo.Record{Topic: "membership.commands", Offset: offset, Key: fmt.Appendf(nil, "%d", user),
			Timestamp: time.UnixMilli(ms),
			Value:     fmt.Appendf(nil, `{"op":"leave","user_id":%d,"at_ns":%d}`, user, ms*int64(time.Millisecond))}
		fp := kgo.FetchTopicPartition{Topic: r.Topic, FetchPartition: kgo.FetchPartition{Partition: 0, Records: []*kgo.Record{r}}}
		go func() { done <- st.a.applyFetched(context.Background(), []kgo.FetchTopicPartition{fp}) }()
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(5 * time.Second):
			close(fs.release)
			t.Fatalf("the leave at offset %d waited for a sync", offset)
		}
		if st.a.gate.Allows(user, uint64(ms+1)*uint64(time.Millisecond)) {
			t.Fatalf("user %d's leave applied, but the gate still allows the user", user)
		}
	}
	fs.hold()
	leave(0, 1)
	select {
	case <-fs.entered:
	case <-time.After(10 * time.Second):
		close(fs.release)
		t.Fatal("the first batch's sync did not start")
	}
	leave(1, 2) // the first batch's sync is held: this one must not wait for it
	if got := c.applied.Load(); got != 0 {
		t.Fatalf("applied offset %d before any sync was over, want 0", got)
	}
	if items := st.a.outbox.take(); len(items) != 0 {
		t.Fatalf("%d outbox records before any sync was over, want none", len(items))
	}
	close(fs.release)
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-failed:
		t.Fatalf("syncer failed: %v", err)
	default:
	}
	if got := c.applied.Load(); got != 2 {
		t.Fatalf("applied offset %d after the syncs, want 2", got)
	}
	if items := st.a.outbox.take(); len(items) != 2 {
		t.Fatalf("%d outbox records after the syncs, want the two leaves' changelog records", len(items))
	}
}

// BenchmarkApplyLeaves: one leave per commands batch, back to back, on a
// store synced to this machine's disk, as the applier sees it: "inline"
// waits for each batch's sync before the next (as before the syncer),
// "syncer" hands the sync over and goes on. ns/op is how long the next
// leave waits for the applier.
func BenchmarkApplyLeaves(b *testing.B) {
	for _, mode := range []string{"inline", "syncer"} {
		b.Run(mode, func(b *testing.B) {
			st := newCommandsStateOn(b, nil, b.TempDir(), &membership.Options{})
			defer st.store.Close()
			c := newClaim(0, 1, 0, 0)
			c.recovery.done = true
			st.a.claims.put(c)
			var stop func() error
			if mode == "syncer" {
				stop = st.a.startSyncer(func(err error) { b.Error(err) })
			}
			ctx := context.Background()
			var offset int64
			b.ReportAllocs()
			for b.Loop() {
				ms := 1_000_000 + offset
				r := &kgo.Record{Topic: "membership.commands", Offset: offset, Key: fmt.Appendf(nil, "%d", offset+1),
					Timestamp: time.UnixMilli(ms),
					Value:     fmt.Appendf(nil, `{"op":"leave","user_id":%d,"at_ns":%d}`, offset+1, ms*int64(time.Millisecond))}
				fp := kgo.FetchTopicPartition{Topic: r.Topic, FetchPartition: kgo.FetchPartition{Partition: 0, Records: []*kgo.Record{r}}}
				if err := st.a.applyFetched(ctx, []kgo.FetchTopicPartition{fp}); err != nil {
					b.Fatal(err)
				}
				offset++
				if offset%1024 == 0 {
					st.a.outbox.take() // as the signals loop would
				}
			}
			if stop != nil {
				if err := stop(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
