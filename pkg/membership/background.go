package membership

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// Pebble retries a flush or compaction that failed at once and for ever: on a
// full disk it spins, logging an error each time, and a store being opened
// waits for the flush of its log without end (pebble.Open never returns),
// while a running one goes on until its memtables are full and then stalls
// every commit. The store turns such a failure, once it has lasted
// Options.BackgroundFailureTimeout, into its own failure (ErrFailed): every
// later call, Open included, returns it.

// background tracks the failures of Pebble's background jobs.
type background struct {
	dir     string
	timeout time.Duration
	log     *slog.Logger
	fail    func(*fatalError) // marks the store failed

	mu struct {
		sync.Mutex
		since time.Time // when the current run of failures began; zero when none
		n     int       // failures in the current run
	}
	// failed is closed when a background job failed the store: a run of
	// failures, or a fatal error (fatal). err is that failure, set before
	// failed is closed.
	failed     chan struct{}
	failedOnce sync.Once
	err        *fatalError
}

func newBackground(dir string, timeout time.Duration, log *slog.Logger, fail func(*fatalError)) *background {
	return &background{dir: dir, timeout: timeout, log: log, fail: fail, failed: make(chan struct{})}
}

// listener returns the Pebble events the store listens to.
func (bg *background) listener() *pebble.EventListener {
	return &pebble.EventListener{
		BackgroundError: bg.failure,
		FlushEnd: func(i pebble.FlushInfo) {
			if i.Err == nil {
				bg.success()
			}
		},
		CompactionEnd: func(i pebble.CompactionInfo) {
			if i.Err == nil {
				bg.success()
			}
		},
	}
}

// backgroundRetryPause slows Pebble's retries of a failing job down from a
// spin to a hundred a second. It is taken in Pebble's job goroutine, which
// would otherwise retry at once.
const backgroundRetryPause = 10 * time.Millisecond

// failure records a failed background job, failing the store once the
// failures have gone on for the timeout.
func (bg *background) failure(err error) {
	bg.mu.Lock()
	now := time.Now()
	if bg.mu.since.IsZero() {
		bg.mu.since = now
		bg.log.Log(context.Background(), slog.LevelError, "membership store: a background flush or compaction failed; Pebble retries it",
			"dir", bg.dir, "err", err)
	}
	bg.mu.n++
	since, n := bg.mu.since, bg.mu.n
	bg.mu.Unlock()
	if d := now.Sub(since); d >= bg.timeout {
		bg.fatal(&fatalError{dir: bg.dir, cause: err,
			msg: fmt.Sprintf("a background flush or compaction failed %d times in %v: %v", n, d.Round(time.Millisecond), err)})
	}
	time.Sleep(backgroundRetryPause)
}

// fatal fails the store by f, a fatal error of Pebble's met in one of its
// background jobs (see pebbleLogger.Fatalf).
//
// failed is closed before the store is marked failed: whoever sees the
// store failed (Store.Failed) and then closes it must find failed closed,
// or Store.Close would wait for Pebble's job, which never ends.
func (bg *background) fatal(f *fatalError) {
	bg.failedOnce.Do(func() {
		bg.err = f
		close(bg.failed)
		bg.fail(f)
	})
}

// fatalHere fails the store by f where a storage error cannot be returned
// and Pebble must not go on (its Fatalf, a failed sync of a directory).
// Inside a call of the store it panics with f, which the call recovers
// (Store.guard) and returns as its error. In a goroutine of Pebble's own
// (a flush or compaction writing the MANIFEST) nothing could recover a
// panic, which would end the process with a stack trace: there it fails
// the store (Store.Failed) and ends only that goroutine, with
// runtime.Goexit, so Pebble does not go on past the failure. Pebble's
// deferred calls run (its mutexes are released), and the store refuses
// every later call.
func (bg *background) fatalHere(f *fatalError) {
	if inStoreCall() {
		panic(f)
	}
	bg.log.Log(context.Background(), slog.LevelError, "membership store: failed in a background job of Pebble's; every later call fails",
		"dir", bg.dir, "err", f.msg)
	bg.fatal(f)
	runtime.Goexit()
}

// inStoreCall reports whether the calling goroutine is inside a method of
// the store (or a goroutine one started), every one of which that reaches
// Pebble recovers the panic of Fatalf. Pebble's background goroutines have
// none on their stack. Goroutines carry no identity in Go, so the stack
// is the only witness; Fatalf is rare, and the walk is cheap next to it.
func inStoreCall() bool {
	// The prefixes of the store's methods and of the closures inside them,
	// as the runtime names them: "<package path>.(*Store).Close.func1".
	pkg := reflect.TypeFor[Store]().PkgPath()
	methods := [...]string{pkg + ".(*Store).", pkg + ".(*Batch).", pkg + ".(*Bulk)."}
	pcs := make([]uintptr, 512)
	frames := runtime.CallersFrames(pcs[:runtime.Callers(2, pcs)])
	for {
		fr, more := frames.Next()
		for _, m := range methods {
			if strings.HasPrefix(fr.Function, m) {
				return true
			}
		}
		if !more {
			return false
		}
	}
}

// dirSyncFS is the store's file system: FS, but for the syncs of
// directories. Pebble panics when one fails (vfs/atomicfs: an fsync error
// cannot be recovered from), in its own goroutines too; the store turns
// that into its failure (background.fatalHere).
type dirSyncFS struct {
	vfs.FS
	bg  *background
	dir string
}

// OpenDir implements vfs.FS.
func (d dirSyncFS) OpenDir(name string) (vfs.File, error) {
	f, err := d.FS.OpenDir(name)
	if err != nil {
		return nil, err
	}
	return dirFile{File: f, fs: d}, nil
}

// Unwrap returns the file system it wraps, as vfs's wrappers do.
func (d dirSyncFS) Unwrap() vfs.FS { return d.FS }

// dirFile is a directory opened through dirSyncFS.
type dirFile struct {
	vfs.File
	fs dirSyncFS
}

// Sync implements vfs.File: a failure fails the store.
func (f dirFile) Sync() error {
	if err := f.File.Sync(); err != nil {
		f.fs.bg.fatalHere(&fatalError{dir: f.fs.dir, cause: err, msg: fmt.Sprintf("sync of a directory failed: %v", err)})
		return err // not reached
	}
	return nil
}

// success ends a run of failures.
func (bg *background) success() {
	bg.mu.Lock()
	bg.mu.since, bg.mu.n = time.Time{}, 0
	bg.mu.Unlock()
}
