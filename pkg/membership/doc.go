// Package membership is the durable record of who has left the community
// personalization layer, and when. It stores one small record per user who
// ever left, the closed leave episodes of users who came back, the windows
// in which a late leave may have let signals through, an opaque note per
// user, the consumer checkpoints that the records belong to, and an outbox
// of records still to be delivered elsewhere, all in one Pebble store.
//
// The package knows nothing of Kafka or of the in-memory gate: it turns
// leave and rejoin commands into durable state, and hands that state back,
// one user at a time or all at once on restart ([Store.Restore]).
//
// # Model
//
// A user is [Active] or [Left]. A user with no record is Active: only users
// who ever left have a state record (a user who never left may have a note,
// and nothing else). While Left, the user's open leave has a
// boundary, left_at: signals with an event time at or after it belong to no
// cohort. A rejoin closes the open leave into an [Episode] [left_at,
// rejoined_at) that is kept for good, so a purge job can tell exactly which
// contributions were the user's.
//
// Times are nanoseconds since the Unix epoch, as uint64, always taken from the
// command (atNs), never from the wall clock: the state is a pure function of
// the commands applied and their order, so replaying the same commands gives
// the same bytes. [OpenEnd] (math.MaxUint64) marks an episode that is still
// open and is therefore not a valid command time.
//
// # Commands and their identity
//
// A [Command] is an op, a user, a boundary and an optional request id; all
// four are its identity. The store remembers the identities of the user's
// last [IdentityWindow] commands applied (or refused), and a command whose
// identity it remembers for the user is a duplicate: it changes nothing,
// whatever happened in between, and one that was refused is refused again.
// So a command delivered again (a producer's retry, a re-published record)
// can never reopen a leave after a rejoin, or close one after a later
// leave, while it is in the window. The window bounds a user's records by
// its episodes, not by the commands that arrived: the oldest identity is
// forgotten first, and a command delivered again after it was forgotten
// is a new command.
//
// A leave's boundary is first raised to the end of the user's last closed
// episode, if it is earlier: history is never rewritten. Then an Active user
// becomes Left at it; a Left user whose left_at is later has it moved back
// (privacy first: the earliest boundary wins), and a late-leave window of
// the open episode moves with it; otherwise nothing changes. A rejoin closes
// the open episode [left_at, at) and makes the user Active; a rejoin at
// left_at closes the empty episode [left_at, left_at), which holds no signal
// (a leave and a rejoin in the same instant, ordered by their arrival), and a
// rejoin before left_at is refused with [ErrRejoinBeforeLeave]. A rejoin of
// an Active user changes nothing. A leave whose boundary comes out equal to
// the start of the last closed episode (which is then the empty [t, t))
// reopens it: the episode leaves the history, the user is Left at t.
//
// # Invariants
//
// For every user, at every commit:
//
//   - Episodes are ordered (left_at <= rejoined_at), pairwise disjoint and
//     ascending, no two start at the same instant, and the open episode, if
//     any, starts at or after the end of the last closed one. Only a closed
//     episode may be empty.
//   - History is append-only, except that an empty last episode is taken
//     out by a leave that reopens it.
//   - A duplicate writes no byte. A leave or rejoin that changes no state
//     writes only its identity (and forgets the oldest, if the window was
//     full). A user holds at most [IdentityWindow] identities.
//   - A user's state and the checkpoint of the command that produced it are
//     committed in one Pebble batch ([Batch]), so after a crash either both
//     or neither are present. So are the identities, late-leave windows,
//     notes and outbox entries added to the same batch.
//   - A late-leave window ([LateLeave], [Batch.RecordLateLeave]) starts
//     where one of the user's episodes starts, and forwarded_through is not
//     before it. Recording it again merges the two: the larger
//     forwarded_through, exact only if both were. History and late-leave
//     records exist only beside the user's current-state record; a note may
//     exist alone, on a user who never left, who is Active with no history.

// # Late leaves and notes
//
// When a leave arrives after signals at or after its boundary were already
// forwarded, the caller records the window of event times that may have
// leaked with [Batch.RecordLateLeave], so that the purge job can remove them.
// The caller may also attach an opaque note to a user with [Batch.SetNote]
// (the command that last touched the user and its receipt, say); the package
// keeps the last one and hands it back in [Member].Note without reading it.
//
// # Outbox
//
// The outbox holds records the caller must still deliver elsewhere (a
// changelog entry, say), committed atomically with the commands that
// produced them: [Batch.AddOutbox] adds an entry to a batch and returns its
// sequence number, [Store.Outbox] lists the committed entries in sequence
// order, and [Store.DeleteOutbox] deletes them once delivered.
//
// Sequence numbers are assigned by the store and strictly increase over the
// store's whole life: the largest one ever assigned is committed with the
// entries, so a number is not handed out again even after every entry was
// deleted and the store reopened. They may have gaps (entries of batches
// that were closed without commit), and the numbers of entries that never
// committed may be handed out again after a reopen. Batches may commit in
// another order than they took their numbers, so a batch that commits later
// may bring an entry with a smaller number than one already listed.
//
// DeleteOutbox is not synced: after a crash a deleted entry may be listed
// again, and is then delivered again. Delivery from the outbox is therefore
// at least once, and the receiving side must tolerate duplicates.
//
// # Dumps and imports
//
// [Batch.AppendDump] writes every record the store keeps of one user (its
// state, history, late-leave windows, note and command identities) into
// one value, and an [Import] writes such dumps, checked by [DecodeDump]
// and given in ascending user order, into a store that holds nothing of
// those users, with checkpoints, all or nothing (sorted table files,
// ingested together). A store rebuilt so holds the same bytes as the one dumped; the
// identities come along, so a command delivered again is still a
// duplicate. The processor carries each user's latest dump in its
// changelog record, for a new owner with an empty store; [Batch.MemberDump]
// gives the member and its dump from one read of the user.
//
// # Offsets
//
// A checkpoint is the next offset to read of a (topic, partition), written
// with [Batch.SetCheckpoint] in the same batch as the state it accounts for.
// The package stores it as given; keeping it monotonic is the caller's job.
//
// Every command is idempotent by its identity while the identity is in its
// user's window, so a consumer may apply a stretch of its command log again
// (after a handover, say) without changing the state, as long as no user
// had more than [IdentityWindow] commands after the stretch began. The checkpoint still commits with the state, so that a
// restarted consumer resumes after the last command the store has.
//
// # Encoding
//
// The byte layout is fixed and golden-tested; it is described in
// encoding.go. Every record read is validated, and a record that does not
// decode exactly is reported as an error wrapping [ErrCorrupt] that names
// its key; the package never guesses.
//
// The format version is 2: version 2 added the identities and the flags of
// late-leave windows, and allows empty episodes. Identity values (seq and
// flags) came later within version 2: an empty one reads as seq 0, not
// refused, and a user's identities shrink to the window at its next
// command. A version-1 store is
// refused (it never recorded identities, so it cannot be upgraded in place);
// the processor rebuilds the state from the commands topic into an empty
// directory.
//
// # Storage faults
//
// An error of the storage under the store (the file system refused a read,
// write or sync, the disk is full) is a [*StorageError] naming the store's
// directory and what the store was doing, with the file system's error,
// which names the file, inside. A read that fails fails its call only. A
// write or sync of the log that fails, or a flush that keeps failing for
// Options.BackgroundFailureTimeout, fails the store ([ErrFailed]): Pebble
// cannot go on from it, so that call and every later one fail, and the
// store must be closed and opened again once the disk is fixed. Nothing is
// lost: every batch whose Commit (or whose CommitNoSyncWait and then
// Syncing.Wait) returned nil is in the store reopened, and the batch that
// failed is there in full or not at all. A failure Pebble cannot go on
// from in a background job of its own, outside any call (writing its
// MANIFEST, syncing a directory), fails the store too: [Store.Failed] is
// closed, [Store.Err] says what failed, and every later call returns it;
// the process goes on (it used to end with a panic).
//
// # Concurrency
//
// A [Store] is safe for concurrent use, except that Close must not race with
// any other method or with open batches (as with Pebble's DB). A [Batch]
// belongs to one goroutine.
//
// Every change is a read-modify-write of one user's records. The intended
// writer pattern is one batch at a time per partition worker, with users
// partitioned so that no two workers ever touch the same user. The store
// enforces this rather than trusting it: the first command for a user claims
// that user for the batch until it is committed or closed, and a command for
// a user claimed by another open batch fails at once with [ErrConflict]
// instead of silently losing an update. [Batch.RecordLateLeave],
// [Batch.SetNote] and [Batch.Member] claim the user in the same way.
// [Store.Leave] and [Store.Rejoin] are one-command batches and take part in
// the same scheme. [Batch.AddOutbox] claims no user; batches with outbox
// entries commit one at a time.
package membership
