package fanout

import (
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/cohortgate/cohortgate/topics"
)

// EventListener receives what the processor does that someone may want to
// count, log or audit: one optional func per kind of event, each with an
// info struct, as Pebble's EventListener. The processor's metrics and
// logs are listeners themselves; Config.EventListener adds the caller's
// (a test, an audit sink), and TeeEventListener combines listeners.
//
// A func is called on whichever goroutine sees the event (the signals
// loop, the commands side, the aligner, the group callbacks, franz-go's
// promise goroutine) and possibly concurrently with other funcs: it must
// be safe for that, fast, and must not block. No event is sent per
// forwarded or dropped signal: those are counted by the metrics directly,
// off any func call.
type EventListener struct {
	// PartitionsAssigned: the instance took partitions over; their signals
	// wait until their commands catch up.
	PartitionsAssigned func(PartitionsInfo)
	// PartitionsRevoked: the instance gave partitions up.
	PartitionsRevoked func(PartitionsInfo)
	// CaughtUp: a partition's commands were applied through an end offset
	// observed after its assignment: it forwards.
	CaughtUp func(CaughtUpInfo)
	// OpenTransaction: a partition's commands became held by a transaction
	// left open on them (Held 0 when the hold starts), are still held
	// (every ten seconds), or no longer are (Ended).
	OpenTransaction func(OpenTransactionInfo)
	// SuspectEnd: an observation of a commands partition's end
	// contradicted what the instance knows of it (a broker that no longer
	// leads it answered, or the log went back); it is not trusted, and the
	// partition's signals wait. Reported when such observations start and
	// when they stop (Cleared); lasting 15 s, they halt the processor.
	SuspectEnd func(SuspectEndInfo)
	// CommandApplied: a command reached the store (rule C5 on).
	CommandApplied func(CommandInfo)
	// LateLeave: a leave came after signals of the user in its episode were
	// forwarded; the window is recorded for the purge job.
	LateLeave func(LateLeaveInfo)
	// WindowsRecovered: a new owner read the windows its predecessors wrote
	// from the changelog.
	WindowsRecovered func(WindowsRecoveredInfo)
	// Handover: a new owner with no state for a partition restored its
	// users from their changelog records, or replays its commands from
	// offset 0 (and says why).
	Handover func(HandoverInfo)
	// RestoreProgress: how far a restore from the changelog is, every
	// five seconds while it reads (the changelog, then the commands for
	// the users who left), and at the end of each read.
	RestoreProgress func(RestoreProgressInfo)
	// Migrated: a partition's new owner re-published to it the commands
	// of its users that other partitions held under an older partition
	// count (migrate.go); its signals are decided only after them.
	Migrated func(MigratedInfo)
	// MigrationWait: that re-publishing could not finish yet (a read or
	// produce failed, or a tail is held by an open transaction); the
	// partition's signals wait.
	MigrationWait func(MigrationWaitInfo)
	// TopologyChanged: the topics changed under the running processor (a
	// partition count, a topic ID); the run ends, and starts again under
	// the new layout.
	TopologyChanged func(TopologyChangedInfo)
	// Misrouted: a record was found outside its key's partition and
	// re-published there.
	Misrouted func(MisroutedInfo)
	// DeadLetter: a record went to the DLQ.
	DeadLetter func(DeadLetterInfo)
	// ProduceFailed: the broker did not take a record; the cycle it belongs
	// to does not commit.
	ProduceFailed func(ProduceFailedInfo)
	// CycleEnd: a cycle (a transaction) ended.
	CycleEnd func(CycleInfo)
	// Stall: the signals side made no progress for Config.StallTimeout
	// (see StallCause): the processor is not ready until it ends
	// (Ended), and halts with a *StallError when it lasts
	// Config.StallHalt.
	Stall func(StallInfo)
	// Restored: the gate was rebuilt from the local store at start.
	Restored func(RestoredInfo)
	// SnapshotSaved: the gate snapshot was written (or failed to be) as
	// Run ended, or while it ran (Running).
	SnapshotSaved func(SnapshotInfo)
}

// PartitionsInfo lists partitions (of both input topics) that changed
// hands.
type PartitionsInfo struct{ Partitions []int32 }

func (i PartitionsInfo) String() string { return fmt.Sprintf("partitions %v", i.Partitions) }

// CaughtUpInfo is a partition that caught up with its commands.
type CaughtUpInfo struct {
	Partition int32
	Applied   int64         // the next commands offset: every command below it is applied
	Took      time.Duration // since its assignment
}

func (i CaughtUpInfo) String() string {
	return fmt.Sprintf("partition %d caught up with its commands below offset %d in %v", i.Partition, i.Applied, i.Took)
}

// OpenTransactionInfo is a commands partition held by an open transaction.
type OpenTransactionInfo struct {
	Partition        int32
	Held             time.Duration // how long so far (or in all, when Ended)
	LastStableOffset int64
	HighWatermark    int64
	Ended            bool
}

func (i OpenTransactionInfo) String() string {
	if i.Ended {
		return fmt.Sprintf("commands partition %d no longer held by an open transaction (held %v)", i.Partition, i.Held)
	}
	return fmt.Sprintf("commands partition %d held by an open transaction for %v (last stable offset %d, high watermark %d)",
		i.Partition, i.Held, i.LastStableOffset, i.HighWatermark)
}

// SuspectEndInfo is an observation of a commands partition's end that was
// not trusted.
type SuspectEndInfo struct {
	Partition  int32
	End        int64 // the end observed
	Epoch      int32 // the leader epoch it was observed under, -1 if not said
	Least      int64 // the least end it could have (the commands applied, the store's checkpoint, an end observed before)
	KnownEpoch int32 // the leader epoch known, when the observed one was older; -1 otherwise
	// Lasted is how long the observations were not trusted, when Cleared.
	Lasted  time.Duration
	Cleared bool
}

func (i SuspectEndInfo) String() string {
	if i.Cleared {
		return fmt.Sprintf("commands partition %d end trusted again after %v (end %d, leader epoch %d)", i.Partition, i.Lasted, i.End, i.Epoch)
	}
	if i.KnownEpoch >= 0 {
		return fmt.Sprintf("commands partition %d end %d not trusted: listed under leader epoch %d, older than the known %d", i.Partition, i.End, i.Epoch, i.KnownEpoch)
	}
	return fmt.Sprintf("commands partition %d end %d not trusted: below %d", i.Partition, i.End, i.Least)
}

// CommandInfo is a command applied to the store.
type CommandInfo struct {
	Op     topics.Op
	Result string // "changed", "noop" or "duplicate"
}

func (i CommandInfo) String() string { return fmt.Sprintf("%s command %s", i.Op, i.Result) }

// LateLeaveInfo is a late leave and the window recorded for it. UserID is
// for the caller's own use: the logging listener leaves it out of logs.
type LateLeaveInfo struct {
	Partition int32
	Offset    int64 // of the command
	UserID    uint64
	Window    topics.LateLeave
}

func (i LateLeaveInfo) String() string {
	return fmt.Sprintf("late leave at commands partition %d offset %d: window [%d, %d] exact %v",
		i.Partition, i.Offset, i.Window.LeftAtNs, i.Window.ForwardedThroughNs, i.Window.Exact)
}

// WindowsRecoveredInfo is one partition's window recovery.
type WindowsRecoveredInfo struct {
	Partition      int32
	Records        int // changelog records of the partition's users read
	Windows        int
	AwaitingReplay int // windows whose episode the store does not hold yet
	Took           time.Duration
	Skipped        bool // UnsafeNoWindowRecovery
}

func (i WindowsRecoveredInfo) String() string {
	if i.Skipped {
		return fmt.Sprintf("partition %d: late-leave windows NOT recovered (unsafe)", i.Partition)
	}
	return fmt.Sprintf("partition %d: %d windows recovered from %d changelog records in %v, %d awaiting replay",
		i.Partition, i.Windows, i.Records, i.Took, i.AwaitingReplay)
}

// HandoverInfo is how a new owner with no state for a partition took it
// over: Source "changelog" (its users restored from their changelog
// records, the commands consumed from From on) or "replay" (the commands
// replayed from offset 0, because of Reason).
type HandoverInfo struct {
	Partition int32
	Source    string // "changelog" or "replay"
	Reason    error  // why not from the changelog; nil when from it
	From      int64  // the commands offset consumption goes on from
	Users     int    // users restored
	Records   int    // changelog records of the partition's users read
	// Reflected is how many restored users' records reflect commands at
	// or above From, which are not applied again.
	Reflected int
	Windows   int // late-leave windows recovered from every record read
	// Spilled is the bytes of restore headers written to spill files,
	// the merges of spill files included: 0 when the restore held them
	// all in memory (Config.RestoreMemory).
	Spilled int64
	// Where the time went, from the start of the restore: reading the
	// changelog (spills included), merging the headers and decoding them
	// and writing the table files, reading the commands below From for
	// the users who left (each must have a record), ingesting the
	// files, setting the gate; Took is all of it and the windows'
	// recovery.
	Read, Written, Checked, Ingested, Gated time.Duration
	Took                                    time.Duration
}

func (i HandoverInfo) String() string {
	if i.Source != "changelog" {
		return fmt.Sprintf("partition %d: replaying commands from offset 0: %v", i.Partition, i.Reason)
	}
	return fmt.Sprintf("partition %d: %d users restored from %d changelog records in %v (read %v), commands from offset %d",
		i.Partition, i.Users, i.Records, i.Took, i.Read, i.From)
}

// RestoreProgressInfo is how far a partition's restore from the
// changelog is (handover.go). Records are offsets: of the changelog
// partitions read, from their start to the end the read goes to (the
// commands partition's, below the judged offset, while the users who
// left are checked), control records and other partitions' users'
// records included. Bytes are the record batches fetched as the log holds
// them (compressed), of the partitions' size on the brokers.
type RestoreProgressInfo struct {
	Partition int32
	// Phase is what the restore does: waiting for memory, reading the
	// changelog, merging the spilled restore headers (when more files
	// than a merge reads at once were spilled), writing the users'
	// records, reading the commands for the users who left, ingesting
	// and setting the gate.
	Phase                 string
	Records, RecordsTotal int64
	// BytesTotal is -1 when the brokers do not say (DescribeLogDirs
	// refused) or the phase reads no records.
	Bytes, BytesTotal int64
	// Elapsed is the time since the restore started; the rates are over
	// the phase so far, per second.
	Elapsed                          time.Duration
	RecordsPerSecond, BytesPerSecond float64
}

func (i RestoreProgressInfo) String() string {
	total := "?"
	if i.BytesTotal >= 0 {
		total = fmt.Sprint(i.BytesTotal)
	}
	return fmt.Sprintf("partition %d: %s, %d of %d records, %d of %s bytes, %.0f records/s, after %v",
		i.Partition, i.Phase, i.Records, i.RecordsTotal, i.Bytes, total, i.RecordsPerSecond, i.Elapsed.Round(time.Millisecond))
}

// Event sources: which input a record came from.
const (
	SourceSignals  = "signals"
	SourceCommands = "commands"
)

// MisroutedInfo is a record found outside its key's partition.
type MisroutedInfo struct {
	Source    string // SourceSignals or SourceCommands
	Topic     string
	Partition int32 // where it was found
	Offset    int64
	Want      int32 // its key's partition, where it was re-published
}

func (i MisroutedInfo) String() string {
	return fmt.Sprintf("%s %s[%d] offset %d in the wrong partition, re-published to %d", i.Source, i.Topic, i.Partition, i.Offset, i.Want)
}

// DeadLetterInfo is a record sent to the DLQ.
type DeadLetterInfo struct {
	Source    string // SourceSignals or SourceCommands
	Reason    topics.Reason
	Topic     string
	Partition int32
	Offset    int64
	Err       error
}

func (i DeadLetterInfo) String() string {
	return fmt.Sprintf("%s %s[%d] offset %d dead-lettered: %s: %v", i.Source, i.Topic, i.Partition, i.Offset, i.Reason, i.Err)
}

// ProduceFailedInfo is a record the broker did not take.
type ProduceFailedInfo struct {
	Topic string
	Err   error
	// Refused says the broker refused the record for a reason of its own:
	// it will be settled otherwise when met again (see poison.go).
	Refused bool
}

func (i ProduceFailedInfo) String() string {
	return fmt.Sprintf("produce to %s failed (refused for itself: %v): %v", i.Topic, i.Refused, i.Err)
}

// Outcome is how a cycle ended. It settles what becomes of the cycle's
// output, its outbox records and its signals; loop.end is the one place
// that acts on it.
type Outcome uint8

// The outcomes.
const (
	// Committed: the output and the offsets are durable together.
	Committed Outcome = iota + 1
	// Aborted: nothing is durable; the cycle's signals are fetched and
	// decided again, its outbox records produced again.
	Aborted
	// OutputOnly: the output was acknowledged but the offsets were not
	// committed (without ExactlyOnce): the signals are processed again by
	// their next owner, at least once.
	OutputOnly
	// Unknown: ending the transaction failed and its outcome is unknown:
	// a definite failure (the producer fenced), or one whose outcome
	// could not be learned from the group's offsets in time; the session
	// must be replaced.
	Unknown
)

func (o Outcome) String() string {
	switch o {
	case Committed:
		return "committed"
	case Aborted:
		return "aborted"
	case OutputOnly:
		return "output only"
	case Unknown:
		return "unknown"
	}
	return fmt.Sprintf("Outcome(%d)", uint8(o))
}

// outputDurable reports whether the cycle's output reached Kafka for good:
// its outbox records are delivered and its refusals settled.
func (o Outcome) outputDurable() bool { return o == Committed || o == OutputOnly }

// CycleInfo is the end of a cycle.
type CycleInfo struct {
	Outcome Outcome
	// Err is the reason for OutputOnly and Unknown; with Committed or
	// Aborted, the failed end whose outcome was then learned (the
	// session stays, with its partitions).
	Err error
}

// errHealed marks the error of a cycle whose end failed without a definite
// answer and whose outcome heal then learned: the session stays.
var errHealed = errors.New("transaction end healed")

func (i CycleInfo) String() string { return fmt.Sprintf("cycle %v: %v", i.Outcome, i.Err) }

// errNoSnapshot is RestoredInfo.Fallback's cause when no snapshot file
// exists: normal at a first start, a sign of a stop that was not clean
// otherwise.
var errNoSnapshot = errors.New("no snapshot")

// StallCause names what made no progress in a Stall. The values are the
// cause label of the stalls metric.
type StallCause string

// The stall causes.
const (
	// StallAborts: every cycle that carried a record aborted (or ended
	// with an unknown outcome): a produce that fails for ever, a record
	// refused for ever, a group that rebalances without end.
	StallAborts StallCause = "aborts"
	// StallFetch: every fetch of an owned input partition failed.
	StallFetch StallCause = "fetch"
	// StallHeld: a caught-up partition held signals, decided none and
	// applied no command for StallTimeout past Grace and MaxFutureSkew (a
	// transaction left open on its commands excepted).
	StallHeld StallCause = "held"
	// StallCycle: no cycle ended (a poll, a flush or a transaction's end
	// that does not return).
	StallCycle StallCause = "cycle"
)

// Stall is the signals side making no progress.
type Stall struct {
	Cause StallCause
	// Topic is the input whose fetches fail (StallFetch), empty otherwise.
	Topic string
	// Partition is the partition that makes no progress (StallFetch,
	// StallHeld), -1 when every partition is stalled.
	Partition int32
	// Since is when the first failure of the stall's streak was seen, on
	// the processor's monotonic clock (Config.Monotonic, from an origin of
	// its own): only its distance from another such instant means
	// anything.
	Since time.Time
	Err   error // the latest failure, nil when the cause has none
}

func (s Stall) same(o *Stall) bool {
	return s.Cause == o.Cause && s.Topic == o.Topic && s.Partition == o.Partition
}

func (s Stall) String() string {
	var what string
	switch s.Cause {
	case StallAborts:
		what = "every cycle carrying a record aborted"
	case StallFetch:
		what = fmt.Sprintf("every fetch of %s partition %d failed", s.Topic, s.Partition)
	case StallHeld:
		what = fmt.Sprintf("partition %d held signals and decided none", s.Partition)
	case StallCycle:
		what = "no cycle ended"
	default:
		what = string(s.Cause)
	}
	if s.Err != nil {
		what += ": " + s.Err.Error()
	}
	return what
}

// StallInfo is a stall that began (Lasted: how long its failures had gone
// on when it was assessed one) or ended (Ended, Lasted in all).
type StallInfo struct {
	Stall
	Lasted time.Duration
	Ended  bool
}

func (i StallInfo) String() string {
	if i.Ended {
		return fmt.Sprintf("stall (%s) ended after %v", i.Cause, i.Lasted.Round(time.Millisecond))
	}
	return fmt.Sprintf("stalled (%s) for %v: %v", i.Cause, i.Lasted.Round(time.Millisecond), i.Stall.String())
}

// RestoredInfo is the rebuild of the gate at start.
type RestoredInfo struct {
	// Members are the users restored, and Episodes their episodes; from a
	// snapshot, the users with episodes, and Episodes is 0 (not counted).
	Members, Episodes int
	Took, Scan        time.Duration // Scan: the store scan's share, 0 from a snapshot
	// Source is "snapshot" when the gate snapshot was loaded, "scan" when
	// the store was scanned.
	Source string
	// Fallback is why the snapshot was not used, nil if it was or if none
	// is configured.
	Fallback error
	// Regate is, for a snapshot older than the store (written while
	// running, before a kill), the partitions whose commands are applied
	// again from its label, with how many commands that is at most; nil
	// when the snapshot reflected the store exactly.
	Regate map[int32]int64
}

func (i RestoredInfo) String() string {
	return fmt.Sprintf("restored %d members, %d episodes in %v from the %s", i.Members, i.Episodes, i.Took, i.Source)
}

// SnapshotInfo is the gate snapshot written as Run ended, or while it ran
// (Config.GateSnapshotInterval).
type SnapshotInfo struct {
	Path    string
	Members int
	Bytes   int64
	Took    time.Duration // from the copy of the gate to the file's rename
	Held    time.Duration // of which the copy, which the commands wait for
	Err     error         // nil if written
	Running bool          // written while running, not at the end
}

func (i SnapshotInfo) String() string {
	if i.Err != nil {
		return fmt.Sprintf("gate snapshot %s not written: %v", i.Path, i.Err)
	}
	return fmt.Sprintf("gate snapshot %s: %d members, %d bytes in %v (held %v)", i.Path, i.Members, i.Bytes, i.Took, i.Held)
}

// MigratedInfo is a partition's users' commands re-published to it from
// other partitions after the commands' partition count changed.
type MigratedInfo struct {
	Partition   int32
	Tails       int  // partitions read
	Restored    bool // read from their judged offsets (the users were restored from the changelog); from 0 otherwise
	Read        int  // commands read
	Republished int  // of them, commands of the partition's users, re-published to it
	Took        time.Duration
}

func (i MigratedInfo) String() string {
	return fmt.Sprintf("partition %d: %d commands of its users re-published from %d other partitions (%d read) in %v",
		i.Partition, i.Republished, i.Tails, i.Read, i.Took)
}

// MigrationWaitInfo is a re-publishing that could not finish yet.
type MigrationWaitInfo struct {
	Partition int32
	Attempt   int // of the read, when it failed
	Behind    int // partitions not read to their end yet, when it waits
	Err       error
}

func (i MigrationWaitInfo) String() string {
	return fmt.Sprintf("partition %d waits for the commands of its users in other partitions: %v", i.Partition, i.Err)
}

// TopologyChangedInfo is a change of the topics under a running
// processor.
type TopologyChangedInfo struct {
	Changes []string
	// Forgotten says the store's users were forgotten: the commands' or
	// inputs' partition counts changed, and every partition is restored
	// under the new ones.
	Forgotten bool
}

func (i TopologyChangedInfo) String() string {
	return "topics changed: " + strings.Join(i.Changes, "; ")
}

// EnsureDefaults fills every nil func with a no-op and returns l.
func (l *EventListener) EnsureDefaults() *EventListener {
	if l.PartitionsAssigned == nil {
		l.PartitionsAssigned = func(PartitionsInfo) {}
	}
	if l.PartitionsRevoked == nil {
		l.PartitionsRevoked = func(PartitionsInfo) {}
	}
	if l.CaughtUp == nil {
		l.CaughtUp = func(CaughtUpInfo) {}
	}
	if l.OpenTransaction == nil {
		l.OpenTransaction = func(OpenTransactionInfo) {}
	}
	if l.SuspectEnd == nil {
		l.SuspectEnd = func(SuspectEndInfo) {}
	}
	if l.CommandApplied == nil {
		l.CommandApplied = func(CommandInfo) {}
	}
	if l.LateLeave == nil {
		l.LateLeave = func(LateLeaveInfo) {}
	}
	if l.WindowsRecovered == nil {
		l.WindowsRecovered = func(WindowsRecoveredInfo) {}
	}
	if l.Handover == nil {
		l.Handover = func(HandoverInfo) {}
	}
	if l.RestoreProgress == nil {
		l.RestoreProgress = func(RestoreProgressInfo) {}
	}
	if l.Migrated == nil {
		l.Migrated = func(MigratedInfo) {}
	}
	if l.MigrationWait == nil {
		l.MigrationWait = func(MigrationWaitInfo) {}
	}
	if l.TopologyChanged == nil {
		l.TopologyChanged = func(TopologyChangedInfo) {}
	}
	if l.Misrouted == nil {
		l.Misrouted = func(MisroutedInfo) {}
	}
	if l.DeadLetter == nil {
		l.DeadLetter = func(DeadLetterInfo) {}
	}
	if l.ProduceFailed == nil {
		l.ProduceFailed = func(ProduceFailedInfo) {}
	}
	if l.CycleEnd == nil {
		l.CycleEnd = func(CycleInfo) {}
	}
	if l.Stall == nil {
		l.Stall = func(StallInfo) {}
	}
	if l.Restored == nil {
		l.Restored = func(RestoredInfo) {}
	}
	if l.SnapshotSaved == nil {
		l.SnapshotSaved = func(SnapshotInfo) {}
	}
	return l
}

// TeeEventListener returns a listener that calls a, then b, for every
// event. Both are defaulted first.
func TeeEventListener(a, b EventListener) EventListener {
	a.EnsureDefaults()
	b.EnsureDefaults()
	return EventListener{
		PartitionsAssigned: func(i PartitionsInfo) { a.PartitionsAssigned(i); b.PartitionsAssigned(i) },
		PartitionsRevoked:  func(i PartitionsInfo) { a.PartitionsRevoked(i); b.PartitionsRevoked(i) },
		CaughtUp:           func(i CaughtUpInfo) { a.CaughtUp(i); b.CaughtUp(i) },
		OpenTransaction:    func(i OpenTransactionInfo) { a.OpenTransaction(i); b.OpenTransaction(i) },
		SuspectEnd:         func(i SuspectEndInfo) { a.SuspectEnd(i); b.SuspectEnd(i) },
		CommandApplied:     func(i CommandInfo) { a.CommandApplied(i); b.CommandApplied(i) },
		LateLeave:          func(i LateLeaveInfo) { a.LateLeave(i); b.LateLeave(i) },
		WindowsRecovered:   func(i WindowsRecoveredInfo) { a.WindowsRecovered(i); b.WindowsRecovered(i) },
		Handover:           func(i HandoverInfo) { a.Handover(i); b.Handover(i) },
		RestoreProgress:    func(i RestoreProgressInfo) { a.RestoreProgress(i); b.RestoreProgress(i) },
		Migrated:           func(i MigratedInfo) { a.Migrated(i); b.Migrated(i) },
		MigrationWait:      func(i MigrationWaitInfo) { a.MigrationWait(i); b.MigrationWait(i) },
		TopologyChanged:    func(i TopologyChangedInfo) { a.TopologyChanged(i); b.TopologyChanged(i) },
		Misrouted:          func(i MisroutedInfo) { a.Misrouted(i); b.Misrouted(i) },
		DeadLetter:         func(i DeadLetterInfo) { a.DeadLetter(i); b.DeadLetter(i) },
		ProduceFailed:      func(i ProduceFailedInfo) { a.ProduceFailed(i); b.ProduceFailed(i) },
		CycleEnd:           func(i CycleInfo) { a.CycleEnd(i); b.CycleEnd(i) },
		Stall:              func(i StallInfo) { a.Stall(i); b.Stall(i) },
		Restored:           func(i RestoredInfo) { a.Restored(i); b.Restored(i) },
		SnapshotSaved:      func(i SnapshotInfo) { a.SnapshotSaved(i); b.SnapshotSaved(i) },
	}
}

// misrouteLogEvery bounds how often misrouted records are logged: a
// producer with the wrong partitioner misroutes most of its records.
const misrouteLogEvery = 10 * time.Second

// MakeLoggingEventListener returns a listener that logs each event to l at
// the level its kind deserves, as the processor always has: late leaves,
// open transactions, misroutes (at most once per ten seconds), failed
// produces and stalls as warnings, changes of ownership, catch-ups, the
// end of a stall and the restore as information. It logs no user id.
func MakeLoggingEventListener(l *slog.Logger) EventListener {
	var misroute struct {
		sync.Mutex
		last  time.Time
		quiet int // suppressed since last
	}
	return EventListener{
		PartitionsAssigned: func(i PartitionsInfo) {
			l.Info("partitions assigned; catching up with their commands before forwarding", "partitions", i.Partitions)
		},
		PartitionsRevoked: func(i PartitionsInfo) { l.Info("partitions released", "partitions", i.Partitions) },
		CaughtUp: func(i CaughtUpInfo) {
			// An offset, not a count: commands from a committed offset, or
			// a topic's start above 0, are not all applied here.
			l.Info("partition caught up with its commands; forwarding", "partition", i.Partition,
				"next_command_offset", i.Applied, "took", i.Took.String())
		},
		OpenTransaction: func(i OpenTransactionInfo) {
			switch {
			case i.Ended:
				l.Info("commands partition no longer held by an open transaction", "partition", i.Partition,
					"held", i.Held.Round(time.Millisecond).String())
			case i.Held > 0:
				l.Warn("commands partition held by an open transaction; its signals wait until it ends",
					"partition", i.Partition, "held", i.Held.Round(time.Millisecond).String(),
					"last_stable_offset", i.LastStableOffset, "high_watermark", i.HighWatermark)
			}
		},
		SuspectEnd: func(i SuspectEndInfo) {
			if i.Cleared {
				l.Info("commands partition end trusted again", "partition", i.Partition, "end", i.End,
					"leader_epoch", i.Epoch, "after", i.Lasted.Round(time.Millisecond).String())
				return
			}
			l.Warn("commands partition end not trusted (a broker that no longer leads it answered, or the log went back); "+
				"its signals wait, and the processor halts if this lasts", "partition", i.Partition, "end", i.End,
				"leader_epoch", i.Epoch, "least", i.Least, "known_leader_epoch", i.KnownEpoch)
		},
		LateLeave: func(i LateLeaveInfo) {
			l.Warn("late leave: signals of the user at or after the boundary were forwarded",
				"partition", i.Partition, "offset", i.Offset,
				"left_at_ns", i.Window.LeftAtNs, "forwarded_through_ns", i.Window.ForwardedThroughNs, "exact", i.Window.Exact,
				"window", time.Duration(i.Window.ForwardedThroughNs-i.Window.LeftAtNs).String())
		},
		WindowsRecovered: func(i WindowsRecoveredInfo) {
			switch {
			case i.Skipped:
				l.Warn("UNSAFE: late-leave windows of earlier owners not recovered", "partition", i.Partition)
			case i.Records > 0:
				l.Info("late-leave windows recovered from the changelog", "partition", i.Partition,
					"records", i.Records, "windows", i.Windows, "awaiting_replay", i.AwaitingReplay,
					"took", i.Took.Round(time.Millisecond).String())
			}
		},
		Handover: func(i HandoverInfo) {
			if i.Source != "changelog" {
				l.Warn("empty owner: replaying the partition's commands from offset 0, not restoring from the changelog",
					"partition", i.Partition, "why", i.Reason)
				return
			}
			l.Info("empty owner: partition's users restored from the changelog", "partition", i.Partition,
				"users", i.Users, "records", i.Records, "windows", i.Windows, "reflected", i.Reflected,
				"commands_from", i.From, "spilled_bytes", i.Spilled, "read", i.Read.Round(time.Millisecond).String(),
				"written", i.Written.Round(time.Millisecond).String(), "leavers_checked", i.Checked.Round(time.Millisecond).String(), "ingested", i.Ingested.Round(time.Millisecond).String(),
				"gated", i.Gated.Round(time.Millisecond).String(), "took", i.Took.Round(time.Millisecond).String())
		},
		RestoreProgress: func(i RestoreProgressInfo) {
			l.Info("restore from the changelog in progress", "partition", i.Partition,
				"phase", i.Phase, "records", i.Records, "records_total", i.RecordsTotal, "bytes", i.Bytes,
				"bytes_total", i.BytesTotal, "records_per_s", int64(i.RecordsPerSecond), "bytes_per_s", int64(i.BytesPerSecond),
				"elapsed", i.Elapsed.Round(time.Millisecond).String())
		},
		Migrated: func(i MigratedInfo) {
			l.Info("partition's users' commands re-published from the partitions that held them under the old count",
				"partition", i.Partition, "tails", i.Tails, "read", i.Read, "republished", i.Republished,
				"from_judged", i.Restored, "took", i.Took.Round(time.Millisecond).String())
		},
		MigrationWait: func(i MigrationWaitInfo) {
			l.Warn("partition waits for its users' commands in other partitions; its signals wait",
				"partition", i.Partition, "attempt", i.Attempt, "behind", i.Behind, "err", i.Err)
		},
		TopologyChanged: func(i TopologyChangedInfo) {
			l.Warn("topics changed; every partition stops forwarding and is taken again under the new layout",
				"changes", strings.Join(i.Changes, "; "), "forgotten", i.Forgotten)
		},
		Misrouted: func(i MisroutedInfo) {
			misroute.Lock()
			defer misroute.Unlock()
			now := time.Now()
			if now.Sub(misroute.last) < misrouteLogEvery {
				misroute.quiet++
				return
			}
			l.Warn("record in the wrong partition for its key; re-published to the key's murmur2 partition "+
				"(producers must use Kafka's default partitioner; kcat: -X partitioner=murmur2_random)",
				"topic", i.Topic, "partition", i.Partition, "offset", i.Offset, "want", i.Want,
				"suppressed", misroute.quiet)
			misroute.last, misroute.quiet = now, 0
		},
		ProduceFailed: func(i ProduceFailedInfo) {
			l.Warn("produce failed", "topic", i.Topic, "refused_for_itself", i.Refused, "err", i.Err)
		},
		CycleEnd: func(i CycleInfo) {
			if errors.Is(i.Err, errHealed) {
				l.Warn("a transaction's end failed unconfirmed; it was ended and its outcome read from the group's offsets",
					"outcome", i.Outcome.String(), "err", i.Err)
			}
			switch i.Outcome {
			case Aborted:
				l.Info("cycle aborted; its signals will be fetched again")
			case OutputOnly:
				l.Warn("offset commit failed; signals will be processed again", "err", i.Err)
			}
		},
		Stall: func(i StallInfo) {
			if i.Ended {
				l.Info("progress again; the stall is over", "cause", string(i.Cause), "topic", i.Topic,
					"partition", i.Partition, "lasted", i.Lasted.Round(time.Millisecond).String())
				return
			}
			l.Warn("no progress: not ready until it resumes, halting if it does not", "cause", string(i.Cause),
				"topic", i.Topic, "partition", i.Partition, "for", i.Lasted.Round(time.Millisecond).String(),
				"stall", i.Stall.String())
		},
		Restored: func(i RestoredInfo) {
			switch {
			case i.Fallback == nil:
			case errors.Is(i.Fallback, errNoSnapshot) && i.Members == 0 && i.Episodes == 0:
				// A first start, or a store whose users never left: no
				// snapshot was written because there was nothing to keep.
				l.Info("no gate snapshot and no member in the store to restore (a first start)", "why", i.Fallback)
			default:
				l.Warn("gate snapshot not used; scanning the store", "why", i.Fallback)
			}
			if len(i.Regate) > 0 {
				var n int64
				for _, c := range i.Regate {
					n += c
				}
				l.Info("gate snapshot older than the store: applying the commands since it again before forwarding",
					"partitions", len(i.Regate), "commands", n)
			}
			l.Info("restored membership state", "members", i.Members, "episodes", i.Episodes,
				"took", i.Took.String(), "scan", i.Scan.String(), "source", i.Source)
		},
		SnapshotSaved: func(i SnapshotInfo) {
			switch {
			case i.Err != nil && i.Running:
				l.Warn("gate snapshot not written while running; the previous one stays", "err", i.Err)
			case i.Err != nil:
				l.Warn("gate snapshot not written; the next start scans the store", "err", i.Err)
			case i.Running:
				l.Info("wrote gate snapshot while running", "path", i.Path, "members", i.Members, "bytes", i.Bytes, "took", i.Took.String(), "held", i.Held.String())
			default:
				l.Info("wrote gate snapshot", "path", i.Path, "members", i.Members, "bytes", i.Bytes, "took", i.Took.String(), "held", i.Held.String())
			}
		},
	}
}
