// Package fanout is cohortgate's Kafka pipeline: it consumes engagement
// signals and membership commands, applies the commands to the durable
// store and the in-memory gate, and forwards each signal to the cohort
// topic unless its user had left at the signal's event time.
//
// A [Processor] is made with [New] from a [Config] and a [Store] (a
// *membership.Store), and runs with [Processor.Run] until its context ends.
// Horizontal scale is Kafka's own: processors in one consumer group share
// the partitions.
//
// # Partitions and ownership
//
// Both input topics are keyed by user id with Kafka's default partitioner
// and have the same partition count (checked at start), so partition p of
// the commands holds every command for the users whose signals are in
// partition p of the signals. The signals topic is consumed in a consumer
// group; for every signals partition p an instance is assigned, it also
// consumes commands partition p, which has no group offsets of its own:
// from the checkpoint its store holds, or from lower when the offset
// metadata committed with the signals says that commands below it have no
// changelog record yet (see Delivery). A store that holds nothing of p (a new
// instance, a wiped disk) is first given p's users from their changelog
// records (the partitions that wait for it side by side, as many as
// Config.RestoreParallel, each saying how far it is in PartitionStatus),
// and the commands are consumed from the offset the previous owners
// judged through (handover.go); when the changelog cannot be
// trusted to hold every user's latest record, from offset 0. Either way
// no signal of p is decided before p's state is. On revocation it stops
// touching p.
//
// # The rule
//
// The README's "The rules, precisely" is the contract, rule by rule (C1 to
// C7 for commands, S1 to S5 for signals); the code names the rules where it
// applies them. In short: a signal of user u with event time t (its record
// timestamp, in ns) is dropped iff t lies in one of u's leave episodes
// [left_at, rejoined_at), the open one being [left_at, ∞). A command's
// boundary is its at_ns, or its record timestamp; a command is idempotent
// by its identity (op, user, boundary, request id), the earliest boundary of
// a leave wins, and history is never rewritten (pkg/membership).
//
// Alignment: a signal of partition p with event time t is decided only once
// the commands of partition p are known complete through wall-clock
// t + Grace. The processor observes, every AlignInterval, the high
// watermark of each owned commands partition and stamps it with the time
// the request was sent: an observation (sent, end) proves that every
// command acknowledged before sent lies below end. The signal waits until
// the commands are applied up to the end of an observation sent at or
// after max(t + Grace, assignment time). Hence a leave acknowledged by
// Kafka at most Grace after the event time of a signal always gates it,
// whatever order the two reach the processor in; and after an assignment,
// no signal is decided before the partition's commands have caught up
// (fail closed). The high watermark, not the last stable offset: commands
// above a transaction left open cannot be read until it ends, and the
// signals wait for them (the aligner reports how long). The latency this
// adds to a signal is Grace, plus up to AlignInterval, plus the time to
// fetch and apply the commands observed.
//
// Clocks (clock.go): Config.Now, the wall clock, may be stepped at any
// instant; Config.Monotonic may not. Every duration and the order of a
// run's own events are monotonic; an observation is stamped with a reading
// of the wall clock that follows a forward step only at a slew of 1 ms per
// second, and a signal's future skew is checked once, when it is fetched,
// against a reading that does not follow a backward step. So no step
// releases a held signal early or dead-letters a valid one.
//
// A signal stamped more than MaxFutureSkew ahead of the processor's clock
// would hold its partition; it goes to the DLQ with reason
// timestamp_future_skew instead. Held signals are bounded per partition by
// HoldMaxBytes: above it the partition's fetching pauses (back-pressure)
// until the hold drains below half.
//
// A leave acknowledged later than the grace is applied all the same. When
// signals of the user in the episode it opens (or extends, moving left_at
// back) were already forwarded, it is counted, logged, and stored with the
// window [left_at, forwarded_through], which the changelog carries to the
// purge job. A claim remembers the signals it forwarded (forwarded.go),
// counting a cycle's only once its output is durable (a late leave recorded while
// that cycle is open waits for its outcome), so forwarded_through is the
// user's latest forwarded signal (exact); when an
// earlier owner of the partition decided signals after left_at, or the
// record no longer reaches back, it is the latest event time decided on
// the partition (not exact). A new owner recovers the windows its
// predecessors wrote from the changelog before it writes a record of its
// own (recover.go).
//
// Poison: every record Kafka accepted on an input takes effect or goes to
// the DLQ with a stable reason. Records too large for where they must go
// are caught before producing (size.go: the producer takes what each
// topic takes, and DLQ copies are truncated to fit); records the broker
// refuses anyway are settled otherwise when met again (poison.go).
//
// Liveness: no fault may leave the signals side looping without progress
// while the processor says it is ready. A stall (stall.go: cycles that
// carry records all abort, an owned partition's fetches all fail, a
// caught-up partition decides none of its held signals nor applies a
// command, no cycle ends) that lasts StallTimeout makes Ready false with
// its cause, until progress resumes; one that lasts StallHalt halts the
// run with a *StallError.
//
// # Goroutines
//
// Run owns, in each run under one layout of the topics (runOnce), these
// goroutines, and returns only after all have exited:
//
//   - the signals loop (Run's own goroutine) owns the consumer-group session
//     and every lane of held signals. It decides signals, produces the
//     forwarded, dead-lettered and re-published records and the outbox,
//     and ends a cycle (a transaction) every CommitInterval;
//   - the commands applier is the only writer of the store and the gate: it
//     applies each fetch of commands in one store batch with the
//     partitions' checkpoints and the outbox entries (changelog records,
//     DLQ records of bad commands) that the signals loop will produce. It
//     owns the syncer, which publishes each batch once the store synced it.
//     It restores the partitions that wait for a restore from the
//     changelog on goroutines of its own, one per partition (at most
//     Config.RestoreParallel running), and joins them before it applies
//     anything else;
//   - the gate's restore from the store at start (restore.go), which the
//     applier and the aligner wait for;
//   - the aligner observes the commands topic's end offsets (high
//     watermark and last stable offset);
//   - the watchers of the topics' counts and IDs (topology.go) and of
//     their size limits (size.go);
//   - the watch on the store, whose failure in Pebble's background halts
//     the run, and the stall watch (stall.go).
//
// The group callbacks run on franz-go's goroutines; they create and drop
// claims (see claim.go) and change what the commands consumer fetches.
//
// # Delivery
//
// With ExactlyOnce, a cycle is a Kafka transaction (franz-go's
// GroupTransactSession, KIP-447 fencing): the forwarded signals, DLQ
// records, outbox records and the signals offsets commit together, so a
// read_committed consumer of the cohort topic sees each forwarded signal
// once across crashes, restarts and rebalances. A cycle ends with a commit
// only if every produce in it succeeded. An aborted cycle rewinds the
// signals to their committed offsets; it never rewinds the store or the
// gate, whose state is a deterministic function of the commands, so the
// signals fetched again meet the same decisions. An error ending a transaction
// means its outcome is unknown: the session is closed and replaced.
//
// The committed offset of a partition is that of its first held signal,
// not of the last fetched one, so held signals are fetched again after a
// crash. Offset metadata carries the partition's highest decided event time
// to its next owner, for late-leave detection, with the commands offset
// below which every command's changelog record committed with it: the next
// owner replaying commands below it neither reports them late again nor
// writes their records again (the previous owner judged them), and starts
// consuming no later than it, so that a command applied but not yet
// recorded (before a crash) is applied again, as a duplicate, and recorded.
// A cycle commits a partition's metadata whenever it changed, also when
// none of its signals moved (at the group's committed offset, or at 0
// when the group has none, once the group answered the claim's offset
// fetch): a run that sees commands alone (a bulk leave) would otherwise
// leave the next start to read them all again. A stop that comes while a
// cycle ends gets one more cycle, which drains what the commands side
// applied last. A partition with no metadata (a new group, whose first
// cycle may have aborted) judged nothing: its commands are read from offset 0, and a log
// that ends below the store's checkpoint still halts the processor
// (CommandsGapError).
// Changelog records, and the DLQ and re-published records of commands, go
// out from the store's outbox: at least once. A changelog record of a
// claim that was lost (or of a previous run) is never produced: its
// partition's next owner writes the user's record anew.
//
// Without ExactlyOnce, offsets are committed after everything the cycle
// produced is acknowledged: at least once.
//
// A store error halts the processor; nothing retries it. The commands side
// returns it (a batch that cannot be read or committed), and so does a
// start that cannot restore the gate; the signals loop halts on a store
// that failed under the delete of delivered outbox entries. The error is
// the store's *membership.StorageError, naming its directory, the
// operation and the file system's error. Signals waiting for the commands
// it could not apply are never decided: a restart restores from the store
// and applies the commands again from the checkpoint committed with it.
//
// Records found in a partition other than their key's murmur2 partition
// (producers using librdkafka's default CRC32 partitioner) are re-published
// to the right partition of the same topic and counted, never applied or
// forwarded where they are.
//
// # Words
//
// One word, one meaning, in the code and its comments:
//
//   - decide: the verdict on one signal or one command by the rules
//     (rules.go: signalRules.decide, commandRules.decide); a signal the
//     verdict sends to the gate is forwarded or dropped there.
//   - late: a leave applied after signals of the episode it opens were
//     forwarded; the applier records its window (recordLate), which the
//     changelog carries to the purge job.
//   - judged: said of the commands offset below which every command's
//     changelog record was committed with the signals' offsets (and its
//     lateness recorded): the offset metadata carries it to the next
//     owner, which neither writes those records again nor reports those
//     leaves late again (claim.judgedBelow, the loop's part.judged).
//   - restore: a partition's users brought to an owner with no state for
//     them from their changelog records (handover.go; restore headers,
//     restore progress, Config.RestoreParallel); at start, the gate is
//     restored from the store or its snapshot (restore.go, snapshot.go;
//     EventListener.Restored), the same word for the same act: state
//     rebuilt from a durable copy without replaying the commands.
//   - replay: the commands applied again from an offset; every shortcut
//     above equals one (TestShortcutsEqualReplay).
//   - stall: no progress of the signals side while it says it is ready;
//     the stall watch assesses it (stall.go).
//
// # Reading order
//
// Each file uses only what it declares itself or what the files after it
// declare, so the package reads top down, from the wiring to the leaves
// (TestReadingOrder holds the files to this list):
//
//   - processor.go: the Processor, its Run and the goroutines it owns;
//   - topology.go: the watch on the topics' counts and IDs while running;
//   - setup.go: connecting to Kafka, checking and creating the topics;
//   - topicids.go: topics known by their IDs, and what one created again
//     while running does;
//   - group.go: the consumer group's callbacks, claims made and dropped;
//   - balancer.go: partition p of every route's input to one instance;
//   - loop.go: the signals loop, its lanes of held signals and cycles;
//   - stall.go: the watch that says when the signals side makes no
//     progress, and halts the run when that lasts;
//   - emit.go: producing a cycle's records and keeping their promises;
//   - session.go: a cycle's transaction, or its plain commit, and Outcome's use;
//     a transaction whose end failed unconfirmed, ended for sure and its
//     outcome learned from the group's offsets (heal);
//   - commands.go: the commands side, the applier;
//   - handover.go: a partition's users restored from the changelog on
//     an owner with no state for it;
//   - migrate.go: after the commands' partition count grew, the commands
//     of a partition's users that others held, re-published to it;
//   - refill.go: a changelog created again, refilled from the store;
//   - claim.go: what both sides share about one owned partition;
//   - recover.go: late-leave windows recovered from the changelog;
//   - changelogread.go: a read of the changelog, for the windows and for
//     a restore;
//   - abortedtail.go: a read's end past transactions a broker aborted
//     without their markers;
//   - restoreprogress.go: restores side by side, their progress and
//     their memory;
//   - restoreheaders.go: the restore header of a changelog record, and
//     each user's latest;
//   - restorespill.go: restore headers beyond a restore's memory,
//     spilled sorted to files, and the merge that takes each user's
//     latest;
//   - rules.go: the rules for one signal (S1 to S5) and one command (C1
//     to C4), as pure verdicts: where every DLQ reason is decided, but
//     the broker's refusals (poison.go) and the store's (C7);
//   - layout.go: the topics' layout the state depends on, and its changes;
//   - align.go: alignment of signals with the commands, and the aligner;
//   - forwarded.go: the signals a claim forwarded, for exact windows;
//   - queue.go: a lane's queue of held signals;
//   - outbox.go: records the store holds until they are produced;
//   - poison.go: records the broker refused, and how they are settled;
//   - records.go: a record's way out: DLQ copies (whole, truncated to a
//     limit, minimal), re-published records, record headers;
//   - size.go: the size limits of the topics, read again while running;
//   - changelog.go: changelog records;
//   - partitioner.go: Kafka's murmur2 partitioning, and pinned records;
//   - restore.go: the gate rebuilt from the store at start;
//   - snapshot.go: the gate saved at a clean stop and while running,
//     loaded at start when it reflects the store's checkpoints or can be
//     brought to them by applying the commands since it again;
//   - episodes.go: episodes as the store and the gate hold them;
//   - metrics.go: the Prometheus series;
//   - authz.go: authorization failures;
//   - store.go: the Store the processor needs;
//   - config.go: Config;
//   - clock.go: the wall and monotonic clocks, and what each measures;
//   - errors.go: the errors Run returns that a caller may act on;
//   - events.go: the EventListener and its infos, Outcome;
//   - doc.go: this.
//
// # Metrics
//
// The processor registers its series (names in metrics.go, prefixed
// cohortgate_) with Config.Registerer. No label carries a user id.
package fanout
