package fanout

import (
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/topics"
)

// Config configures a Processor. New copies it, fills defaults for zero
// fields (EnsureDefaults) and validates it (Validate); a Config is never
// modified by the Processor after New returns.
type Config struct {
	// Brokers are the seed brokers, host:port. Required.
	Brokers []string
	// Group is the consumer group of the signals topic. Default "cohortgate".
	Group string
	// Topics names every topic, and the routes: the signals of each
	// route's input are gated by the one set of commands and forwarded to
	// the route's output (topics.Set). Default topics.Defaults(): one
	// route, topics.Signals to topics.Cohort.
	Topics topics.Set

	// CreateTopics creates missing topics at start with Partitions and
	// ReplicationFactor. When false, missing topics make start fail.
	CreateTopics bool
	// Partitions is the partition count of created input topics. Default 6.
	Partitions int32
	// ReplicationFactor of created topics; -1 takes the broker's default.
	// Default -1.
	ReplicationFactor int16

	// ExactlyOnce forwards in Kafka transactions: forwarded signals, DLQ
	// records, changelog records and the signals offsets commit
	// atomically. When false, offsets are committed after the records they
	// cover are acknowledged (at least once).
	ExactlyOnce bool
	// TransactionalID is the transactional ID of this instance when
	// ExactlyOnce is set. It must be stable across restarts of one
	// instance (so a restart fences its predecessor at once) and distinct
	// between instances. Required with ExactlyOnce.
	TransactionalID string

	// Grace is how long after a signal's event time a leave or rejoin with
	// an earlier boundary may still arrive and be honoured. A signal with
	// event time t is forwarded only once the commands of its partition are
	// known complete up to wall-clock t+Grace. Zero means DefaultGrace (2s);
	// NoGrace asks for none, and then only commands acknowledged before
	// the signal's event time are honoured.
	Grace time.Duration
	// MaxFutureSkew bounds how far a signal's event time may lie ahead of
	// this processor's clock, and how far a command's boundary may lie
	// ahead of the command's own record timestamp. A signal beyond it goes
	// to the DLQ with reason timestamp_future_skew rather than stalling its
	// partition; a command, with reason command_future_skew, rather than
	// making its user left while the user's signals are still forwarded.
	// Default 5s.
	MaxFutureSkew time.Duration
	// AlignInterval is how often the end offsets of owned commands
	// partitions are observed. It bounds the hold a signal sees beyond
	// Grace. Default 10ms.
	AlignInterval time.Duration
	// CommitInterval is how long one transaction (or one offset commit
	// cycle) collects records before it ends, at most: a leave that must
	// learn whether a signal of its user was forwarded in the open one
	// ends it at once. Default 100ms.
	CommitInterval time.Duration
	// HoldMaxBytes caps the signal bytes (key+value+headers) held in memory
	// per partition while they wait for alignment. Above it the partition's
	// fetching pauses until the hold drains below half, so a partition
	// holds at most this plus what its fetches in flight bring (a broker
	// returns at least one whole record batch). Default 16 MiB.
	HoldMaxBytes int64
	// MaxPollRecords bounds the records taken per poll. Default 10000.
	MaxPollRecords int

	// TopologyInterval is how often the topics are compared with the
	// layout found at start (partition counts and topic IDs); a change
	// ends the run, which starts again under the new layout (see
	// Processor.Run). Default 2s.
	TopologyInterval time.Duration

	// StallTimeout bounds how long the signals side may make no progress
	// while it says it is ready (README, "What it promises", 10): cycles that
	// carry records all abort, an owned input partition's fetches all
	// fail, or no cycle ends, for this long; or a caught-up partition
	// decides none of its held signals, and applies no command, for this
	// long past Grace and MaxFutureSkew. The processor is then not ready, saying why, until
	// progress resumes. Default 20s: well above what a broker's leader
	// election or a rebalance holds the loop up (franz-go's leader map is
	// kept up to 5 s, its retry backoff is under 3 s), well below what an
	// operator should wait to hear of it.
	StallTimeout time.Duration
	// StallHalt is how long a stall may last before the processor halts
	// (Run returns a *StallError): a restart, which the orchestrator
	// makes, is preferable to a loop that goes on. Default 5m; NoStallHalt
	// never halts. At least StallTimeout.
	StallHalt time.Duration

	// SessionTimeout is the consumer group session timeout: how long a
	// member that stopped heartbeating keeps its partitions. Zero keeps
	// franz-go's default (45s).
	SessionTimeout time.Duration

	// Testing holds knobs for tests, the chaos harness's control runs and
	// benchmarks; never set them in production.
	Testing Testing

	// RestoreParallel is how many partitions restore from the changelog
	// side by side on a new owner (handover.go): each reads with a
	// client of its own and decodes on two goroutines. Default
	// runtime.GOMAXPROCS(0), at most the partition count.
	RestoreParallel int
	// RestoreMemory bounds, in bytes, what the restores running side by
	// side hold of the changelog's restore headers at once. Before it
	// reads, a restore takes of it its estimate (restoreBytesPerRecord
	// a command judged, at most all of it), waiting while others hold
	// too much (one alone always runs); as it reads, it takes more while
	// the bound has room. It never holds more headers than it took,
	// whatever the changelog's size: when it can take no more, the
	// headers it holds are spilled, sorted, to temporary files in the
	// store's directory (removed when the restore ends, or at the next
	// start), and merged at the end. Add a few MiB of buffers a restore, and what
	// grows with the partition's users rather than its records (8 bytes
	// a user and the episodes of the users with any, until the gate
	// takes them). Default DefaultRestoreMemory.
	RestoreMemory int64

	// GateSnapshot is the path of the gate snapshot: written when Run ends
	// cleanly, loaded at start instead of scanning the store when it still
	// reflects the store's commands checkpoints (see snapshot.go). Its
	// directory must exist. Empty: no snapshot, the store is always
	// scanned.
	GateSnapshot string
	// GateSnapshotInterval, when positive, also writes the gate snapshot
	// while running, at most this often and only when commands were
	// applied since, so that a start after a crash loads a recent one and
	// applies again only the commands since it (snapshot.go). The
	// commands wait while the gate is copied, not while the copy is
	// written; the copy, as large as the gate's table (2.1 GiB at 100M
	// members who left), is held until the write ends. 0: only at a
	// clean stop.
	GateSnapshotInterval time.Duration

	// KafkaOpts are appended to every Kafka client the Processor makes
	// (TLS, SASL, logging, hooks).
	KafkaOpts []kgo.Opt
	// Logger receives operational events (MakeLoggingEventListener) and
	// what no event carries. Default: discard.
	Logger *slog.Logger
	// EventListener receives the processor's events beside its metrics and
	// logs; its nil funcs do nothing. See EventListener.
	EventListener EventListener
	// Registerer receives the processor's metrics. Default: none kept.
	Registerer prometheus.Registerer
	// Now is the wall clock: the instants the processor records and the
	// instant an observation of the commands was sent (see clock.go for
	// how a step of it is followed). Default time.Now. Tests may step it.
	Now func() time.Time
	// Monotonic is a clock that is never stepped, as time elapsed since an
	// arbitrary origin: every duration the processor measures, and the
	// order of its own events. Default: the time since the Processor was
	// made, by the runtime's monotonic clock.
	Monotonic func() time.Duration
}

// Defaults for Config fields left zero.
const (
	DefaultGroup            = "cohortgate"
	DefaultPartitions       = 6
	DefaultGrace            = 2 * time.Second
	DefaultMaxFutureSkew    = 5 * time.Second
	DefaultAlignInterval    = 10 * time.Millisecond
	DefaultCommitInterval   = 100 * time.Millisecond
	DefaultHoldMaxBytes     = 16 << 20
	DefaultRestoreMemory    = 3 << 30
	DefaultMaxPollRecords   = 10000
	DefaultTopologyInterval = 2 * time.Second
	DefaultStallTimeout     = 20 * time.Second
	DefaultStallHalt        = 5 * time.Minute
)

// NoStallHalt, as Config.StallHalt, never halts on a stall: the processor
// stays not ready for as long as it lasts.
const NoStallHalt time.Duration = -1

// NoGrace, as Config.Grace, asks for no grace at all: a signal waits only
// for the commands acknowledged before its event time. (A zero Grace is the
// default, DefaultGrace.)
const NoGrace time.Duration = -1

// grace is the grace in force: Grace, or zero for NoGrace.
func (c *Config) grace() time.Duration { return max(c.Grace, 0) }

// EnsureDefaults fills zero fields with their defaults and returns c. A
// negative ReplicationFactor stays -1; zero becomes -1.
func (c *Config) EnsureDefaults() *Config {
	if c.Group == "" {
		c.Group = DefaultGroup
	}
	if c.Topics.Commands == "" && c.Topics.Signals == "" && c.Topics.Cohort == "" &&
		c.Topics.DLQ == "" && c.Topics.Changelog == "" && len(c.Topics.Routes) == 0 {
		c.Topics = topics.Defaults()
	}
	if c.Partitions == 0 {
		c.Partitions = DefaultPartitions
	}
	if c.ReplicationFactor == 0 {
		c.ReplicationFactor = -1
	}
	if c.Grace == 0 {
		c.Grace = DefaultGrace
	}
	if c.MaxFutureSkew == 0 {
		c.MaxFutureSkew = DefaultMaxFutureSkew
	}
	if c.AlignInterval == 0 {
		c.AlignInterval = DefaultAlignInterval
	}
	if c.CommitInterval == 0 {
		c.CommitInterval = DefaultCommitInterval
	}
	if c.HoldMaxBytes == 0 {
		c.HoldMaxBytes = DefaultHoldMaxBytes
	}
	if c.RestoreParallel == 0 {
		c.RestoreParallel = runtime.GOMAXPROCS(0)
	}
	if c.RestoreMemory == 0 {
		c.RestoreMemory = DefaultRestoreMemory
	}
	if c.MaxPollRecords == 0 {
		c.MaxPollRecords = DefaultMaxPollRecords
	}
	if c.TopologyInterval == 0 {
		c.TopologyInterval = DefaultTopologyInterval
	}
	if c.StallTimeout == 0 {
		c.StallTimeout = DefaultStallTimeout
	}
	if c.StallHalt == 0 {
		c.StallHalt = DefaultStallHalt
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.Registerer == nil {
		c.Registerer = prometheus.NewRegistry()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	if c.Monotonic == nil {
		c.Monotonic = monotonicSince()
	}
	return c
}

// Validate reports every invalid field, one per line, each naming the field.
func (c *Config) Validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if len(c.Brokers) == 0 {
		bad("Brokers: at least one seed broker (host:port) is required")
	}
	for _, b := range c.Brokers {
		if strings.TrimSpace(b) == "" || !strings.Contains(b, ":") {
			bad("Brokers: %q is not host:port", b)
		}
	}
	if err := c.Topics.Validate(); err != nil {
		bad("Topics: %v", err)
	}
	if c.Partitions < 1 {
		bad("Partitions: %d must be at least 1", c.Partitions)
	}
	if c.ReplicationFactor < -1 {
		bad("ReplicationFactor: %d must be -1 (broker default) or at least 1", c.ReplicationFactor)
	}
	if c.ExactlyOnce && c.TransactionalID == "" {
		bad("TransactionalID: required when ExactlyOnce is set")
	}
	if c.Grace < 0 && c.Grace != NoGrace {
		bad("Grace: %v must not be negative (NoGrace asks for none)", c.Grace)
	}
	if c.MaxFutureSkew < 0 {
		bad("MaxFutureSkew: %v must not be negative", c.MaxFutureSkew)
	}
	if c.RestoreParallel < 1 {
		bad("RestoreParallel: %d must be at least 1", c.RestoreParallel)
	}
	if c.RestoreMemory < 1 {
		bad("RestoreMemory: %d bytes must be at least 1", c.RestoreMemory)
	}
	if c.AlignInterval < time.Millisecond {
		bad("AlignInterval: %v must be at least 1ms", c.AlignInterval)
	}
	if c.CommitInterval < time.Millisecond {
		bad("CommitInterval: %v must be at least 1ms", c.CommitInterval)
	}
	if c.HoldMaxBytes < 1<<10 {
		bad("HoldMaxBytes: %d must be at least 1024", c.HoldMaxBytes)
	}
	if c.SessionTimeout < 0 {
		bad("SessionTimeout: %v must not be negative", c.SessionTimeout)
	}
	if c.MaxPollRecords < 1 {
		bad("MaxPollRecords: %d must be at least 1", c.MaxPollRecords)
	}
	if c.TopologyInterval < time.Millisecond {
		bad("TopologyInterval: %v must be at least 1ms", c.TopologyInterval)
	}
	if c.StallTimeout < 10*time.Millisecond {
		bad("StallTimeout: %v must be at least 10ms", c.StallTimeout)
	}
	if c.StallHalt < c.StallTimeout && c.StallHalt != NoStallHalt {
		bad("StallHalt: %v must be at least StallTimeout (%v), or NoStallHalt", c.StallHalt, c.StallTimeout)
	}
	return errors.Join(errs...)
}

// Testing groups the knobs of Config that no deployment sets, as Pebble
// groups its Experimental options: each Unsafe knob breaks a promise on
// purpose, so that a control run can prove its verifier sees the break,
// and HandoverReplay takes another path for a comparison.
type Testing struct {
	// UnsafeSkipCommands starts every newly owned commands partition at its
	// end instead of at the store's checkpoint, as if the commands were
	// lost. It exists only so that a chaos control run can prove that its
	// verifier sees leaked signals; never set it otherwise.
	UnsafeSkipCommands bool
	// UnsafeObserveLSO aligns signals with the commands partitions' last
	// stable offset instead of their high watermark, so that a leave
	// acknowledged behind a transaction left open does not hold the
	// signals it must stop. It exists only so that a chaos control run can
	// prove that its verifier sees the leak; never set it otherwise.
	UnsafeObserveLSO bool
	// UnsafeNoWindowRecovery skips reading the changelog for late-leave
	// windows when a partition is taken over, so that an earlier owner's
	// windows vanish from the records this instance writes. It exists only
	// so that a chaos control run can prove that its verifier sees
	// missing windows; never set it otherwise.
	UnsafeNoWindowRecovery bool
	// UnsafeRestoreWithoutIdentities drops the command identities of the
	// users a new owner restores from the changelog (handover.go), so
	// that a command delivered again after the handover is applied as a
	// new one (rule C5 broken). It exists only so that a control run can
	// prove that a restore must carry them; never set it otherwise.
	UnsafeRestoreWithoutIdentities bool
	// UnsafeIgnoreTopology keeps a run going under the partition counts
	// it found at start when the topics grow: no watcher compares them
	// with that layout (topology.go), the commands' observations do not
	// check their count (align.go), and a claim of an input partition
	// beyond it is taken instead of ending the run. The processor then
	// does what it did before it tracked its layout: commands produced to
	// a new partition are read by nobody while the inputs have not grown,
	// and their users' signals are forwarded. It exists only so that a
	// chaos control run can prove that its verifier sees the leak; never
	// set it otherwise.
	UnsafeIgnoreTopology bool

	// SnapshotFS is the file system the gate snapshot (Config.GateSnapshot)
	// is written to and read from; nil is the operating system's. Crash
	// tests put it on a crashable in-memory file system (Pebble's
	// vfs.NewCrashableMem), where a clone taken at any moment is what a
	// kill, or a power loss, would leave.
	SnapshotFS vfs.FS

	// HandoverReplay makes a new owner with no state for a partition
	// replay its commands from offset 0, as if the changelog could not be
	// trusted, instead of restoring the partition's users from their
	// changelog records (handover.go). For comparisons and benchmarks.
	HandoverReplay bool
}
