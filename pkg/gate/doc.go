// Package gate is the in-memory check read on every engagement signal: may
// this user's signal, stamped at this time, be forwarded to the cohort
// aggregates?
//
// A [Map] holds, for each user who ever left, the user's leave episodes as
// the durable membership store gives them. [Map.Allows] answers false iff the
// signal's timestamp lies inside one of those episodes; a user without an
// entry (most users, who never left) is always allowed.
//
// # Units and invariants
//
//   - Timestamps are nanoseconds since the Unix epoch, as uint64.
//   - An [Episode] is the half-open interval [LeftAtNs, RejoinedAtNs): a
//     signal at exactly LeftAtNs is denied, one at exactly RejoinedAtNs is
//     allowed. The episode still open has RejoinedAtNs == [OpenEnd] and covers
//     every timestamp from LeftAtNs on, math.MaxUint64 included.
//   - A user's episodes are ascending and disjoint: each RejoinedAtNs is ≥
//     LeftAtNs, each episode starts no earlier than the previous one ends,
//     and only the last one may be open. [Map.Set] rejects anything else
//     with an error wrapping [ErrBadEpisodes] and leaves the user's entry as
//     it was. Empty episodes (LeftAtNs == RejoinedAtNs, a rejoin in the same
//     nanosecond as the leave) are accepted and cover no timestamp.
//   - Every user id is valid, 0 and math.MaxUint64 included.
//
// # Concurrency
//
// Any number of goroutines may call [Map.Allows], [Map.Episodes], [Map.Len]
// and [Map.MemoryBytes] at any time, also while [Map.Set] runs. Readers take
// no lock and Allows allocates nothing. Set calls are serialized on a mutex;
// they are rare (membership commands and the start-up restore). [Map.Grow]
// takes the same mutex: it rebuilds the table as a growing Set does.
//
// A reader that runs concurrently with a Set of the same user sees either
// the episodes before that Set or the episodes after it, never a mix: every
// user's state is published with one atomic store, and what it points to is
// never modified afterwards. A Set that has returned is visible to every
// read that starts after it. A read may still see an earlier state while it
// overlaps a Set that grows the table: it finishes on the table it started
// on.
//
// # Layout
//
// Users live in an open-addressing hash table of 16-byte slots (user id,
// state word) with linear probing, at most three quarters full. The state
// word holds the left time of a single open episode inline, which is what
// nearly every entry looks like; any other set of episodes lives in an
// immutable slice that the word points to through an index. In front of
// the table sits a blocked Bloom filter: one 64-bit word per user with 5
// bits set, 8 filter bits per slot (16 MiB for 10M users, about 0.7% false
// positives). It is a sixteenth of the table's size, so the common lookup
// of a user without an entry reads one filter word, which is much more
// likely to be cached than a table slot, and usually stops there. Slots are
// never deleted in place; when the table passes three quarters full it is
// rebuilt into a new one with room for twice the users it then holds (so
// it may shrink if many were cleared), users without episodes are dropped,
// and the new table replaces the old with one atomic store.
//
// # Snapshots
//
// [Map.Save] writes the Map as its table lies in memory (slots, filter,
// then the histories; the layout is in snapshot.go), with a label of the
// caller's and two CRC-32C checksums, one over the header and label and
// one over the body. [Map.Load] reads it back into a table of the same
// size and seed with one sequential read, about as fast as the disk or
// page cache delivers it, instead of one hash and insert per user.
//
//   - A snapshot is one consistent state: [Map.Snapshot] copies the table
//     (memory as large as the table, until released) under the writers'
//     mutex, and [Snapshot.Save] writes the copy with the mutex released,
//     so Set waits for the copy but not for the disk.
//   - Load checks the table on GOMAXPROCS goroutines while it is still
//     reading it.
//   - Load accepts only a snapshot whose size, version, checksums and table
//     invariants (reachable slots, counts, ascending disjoint histories)
//     all check, and whose label the caller accepts; otherwise it returns
//     an error saying why and the Map keeps what it had. What the label
//     must say is the caller's business (fanout: the store's checkpoints).
//   - A Map loaded from a snapshot saves to the same bytes, takes Sets and
//     grows like any other.
//   - The snapshot is little-endian whatever the host; on a little-endian
//     host the table's memory is written and read as it is.
package gate
