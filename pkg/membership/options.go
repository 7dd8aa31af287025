package membership

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// DefaultCacheSize is the block cache size used when Options.CacheSize is 0.
// Membership records are tiny (tens of bytes a user), so this holds the
// records of millions of users.
const DefaultCacheSize = 64 << 20

// Options configures a Store. The zero value is ready to use: Open copies it
// and fills in defaults with EnsureDefaults.
type Options struct {
	// FS is the file system the store lives in. Default: vfs.Default (the
	// operating system's). Tests use vfs.NewMem or vfs.NewCrashableMem.
	FS vfs.FS

	// NoSync, if true, commits without waiting for the write-ahead log to
	// reach stable storage, so a crash may lose commits that returned nil.
	// UNSAFE: it exists only so that a chaos control run can show that
	// syncing matters. Default false.
	NoSync bool

	// Logger receives Pebble's log lines (Info and Error levels). Default: a
	// logger that discards everything, so that opening a store prints
	// nothing. Pebble calls Fatalf only for errors it cannot continue from
	// (a failed write or sync of its write-ahead log or MANIFEST); the
	// store logs those at Error level and fails (ErrFailed). When the
	// failure happens inside a call of the store (a Commit, say), the call
	// returns an error wrapping ErrFailed; when it happens in one of
	// Pebble's background jobs (a flush or compaction writing its
	// MANIFEST), Store.Failed's channel is closed and every later call
	// returns the error. The process goes on either way.
	Logger *slog.Logger

	// CacheSize is the size in bytes of Pebble's block cache. Default
	// DefaultCacheSize; must not be negative.
	CacheSize int64

	// BackgroundFailureTimeout is how long Pebble's background flushes and
	// compactions may keep failing (a full disk, say) before the store
	// fails (ErrFailed): Pebble retries them without end, and without a
	// flush an Open never returns and a running store ends up stalling
	// every commit. Default DefaultBackgroundFailureTimeout; must not be
	// negative.
	BackgroundFailureTimeout time.Duration

	// MaxHistory is the most closed episodes a user keeps: a rejoin that
	// would close one more is refused (ErrHistoryFull) and the user stays
	// left. It bounds a user's state at about 19 bytes an episode.
	// Default DefaultMaxHistory; must not be negative. The rules of every
	// store that replays the same commands must agree on it.
	MaxHistory int
}

// DefaultMaxHistory is the MaxHistory used when it is 0: 10,000 leaves and
// rejoins of one user, about 190 kB of state (BenchmarkUserBytes: 191,624 bytes).
const DefaultMaxHistory = 10000

// DefaultBackgroundFailureTimeout is the BackgroundFailureTimeout used when
// it is 0.
const DefaultBackgroundFailureTimeout = 10 * time.Second

// EnsureDefaults fills in the zero fields of o with their defaults and
// returns o. A nil o is allocated.
func (o *Options) EnsureDefaults() *Options {
	if o == nil {
		o = &Options{}
	}
	if o.FS == nil {
		o.FS = vfs.Default
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.CacheSize == 0 {
		o.CacheSize = DefaultCacheSize
	}
	if o.BackgroundFailureTimeout == 0 {
		o.BackgroundFailureTimeout = DefaultBackgroundFailureTimeout
	}
	if o.MaxHistory == 0 {
		o.MaxHistory = DefaultMaxHistory
	}
	return o
}

// Validate reports the first field of o that is invalid. It expects
// EnsureDefaults to have run.
func (o *Options) Validate() error {
	switch {
	case o.FS == nil:
		return fmt.Errorf("%w: Options.FS is nil", ErrInvalid)
	case o.Logger == nil:
		return fmt.Errorf("%w: Options.Logger is nil", ErrInvalid)
	case o.CacheSize < 0:
		return fmt.Errorf("%w: Options.CacheSize is %d, want >= 0", ErrInvalid, o.CacheSize)
	case o.BackgroundFailureTimeout < 0:
		return fmt.Errorf("%w: Options.BackgroundFailureTimeout is %v, want >= 0", ErrInvalid, o.BackgroundFailureTimeout)
	case o.MaxHistory < 0:
		return fmt.Errorf("%w: Options.MaxHistory is %d, want >= 0", ErrInvalid, o.MaxHistory)
	}
	return nil
}

// pebbleOptions returns the Pebble options for o, which has been defaulted.
func (o *Options) pebbleOptions(dir string, bg *background) *pebble.Options {
	return &pebble.Options{
		CacheSize:     o.CacheSize,
		FS:            dirSyncFS{FS: o.FS, bg: bg, dir: dir},
		Logger:        pebbleLogger{l: o.Logger, dir: dir, bg: bg},
		EventListener: bg.listener(),
	}
}

// writeOptions returns the options every commit uses.
func (o *Options) writeOptions() *pebble.WriteOptions {
	if o.NoSync {
		return pebble.NoSync
	}
	return pebble.Sync
}

// pebbleLogger routes Pebble's printf-style logging to slog, formatting only
// what the handler will keep.
type pebbleLogger struct {
	l   *slog.Logger
	dir string      // the store's, for its fatal errors
	bg  *background // fails the store from a goroutine of Pebble's own
}

var _ pebble.Logger = pebbleLogger{}

func (p pebbleLogger) logf(level slog.Level, format string, args []any) {
	if p.l.Enabled(context.Background(), level) {
		p.l.Log(context.Background(), level, fmt.Sprintf(format, args...), "component", "pebble")
	}
}

// Infof implements pebble.Logger. Pebble's informational lines (WALs found,
// compactions) are about the storage engine, not the store: they go out at
// debug level so that an operator's info log stays about membership.
func (p pebbleLogger) Infof(format string, args ...any) { p.logf(slog.LevelDebug, format, args) }

// Errorf implements pebble.Logger.
func (p pebbleLogger) Errorf(format string, args ...any) { p.logf(slog.LevelError, format, args) }

// Fatalf implements pebble.Logger. Pebble calls it when it cannot go on (a
// failed write or sync of its write-ahead log or MANIFEST, corruption found
// in the background) and expects it not to return: the store fails, as
// background.fatalHere says.
func (p pebbleLogger) Fatalf(format string, args ...any) {
	p.logf(slog.LevelError, format, args)
	f := &fatalError{dir: p.dir, msg: fmt.Sprintf(format, args...)}
	for _, a := range args {
		if err, ok := a.(error); ok {
			f.cause = err
			break
		}
	}
	if p.bg == nil {
		panic(f)
	}
	p.bg.fatalHere(f)
}
