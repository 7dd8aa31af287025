package membership

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2"
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
	// failed is closed when a run of failures failed the store.
	failed     chan struct{}
	failedOnce sync.Once
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
		bg.failedOnce.Do(func() {
			bg.fail(&fatalError{dir: bg.dir, cause: err,
				msg: fmt.Sprintf("a background flush or compaction failed %d times in %v: %v", n, d.Round(time.Millisecond), err)})
			close(bg.failed)
		})
	}
	time.Sleep(backgroundRetryPause)
}

// success ends a run of failures.
func (bg *background) success() {
	bg.mu.Lock()
	bg.mu.since, bg.mu.n = time.Time{}, 0
	bg.mu.Unlock()
}
