// Package workload is cohortgate's seeded test load and the oracle that
// judges a processor's output against it. The chaos harness (cmd/chaos)
// and the load generator (cmd/loadgen) use it; nothing in the processor
// does.
//
// # Plan
//
// [NewPlan] turns a [Config] into a [Plan]: for each signal, in order, the
// user it belongs to, and the points in that sequence at which users leave
// and (later) rejoin. The same Config, seed included, always gives the same
// Plan. User ids are 1..Users. Of the users, LeavePct percent leave once,
// at a uniformly chosen point; RejoinPct percent (chosen among the leavers)
// rejoin at a later point; and one leaver in eight sends its leave a
// second time before rejoining, which must change nothing (leaving twice
// keeps the first boundary).
//
// Signal number seq carries the value "sig-<seq>-" padded with '.' to
// ValueSize bytes ([AppendValue]), so that the verifier recognises each
// signal wherever it turns up ([ParseSignalID]).
//
// # Producing
//
// [Produce] writes a Plan to the signals and commands topics, keyed by
// decimal user id with the client's partitioner (franz-go's default,
// murmur2, like Kafka's Java client). Signals go asynchronously, stamped
// with the wall clock when they are handed to the client. A command is
// stamped with at_ns = the wall clock just before it is produced and is
// produced synchronously: the next signal is produced only after Kafka has
// acknowledged it. Every signal produced after a command therefore has an
// event time after the command's acknowledgement (to the millisecond: Kafka
// timestamps are milliseconds), so the processor's alignment rule (README,
// "What it promises", 2) makes the command gate it whenever the grace is at
// least a millisecond: with this load, a correct processor leaks nothing
// and loses nothing. Signals produced before a command have event times
// before its boundary and are forwarded, however late they arrive.
//
// # Verifying
//
// [Verify] does not trust the Plan: it reads what is actually in the input
// topics and recomputes the decisions. It applies the commands of each
// commands partition in offset order to a [membership.Store] on an
// in-memory file system (the processor's own semantics, so the two cannot
// drift), and expects a signal forwarded iff its event time lies in none of
// its user's leave episodes [left_at, rejoined_at). It then reads the
// cohort topic read_committed and counts forwarded, expected, duplicated,
// lost and leaked signals, and the partitions left with an open
// transaction ([Report]). Every read is bounded by the offsets observed
// when it starts.
package workload
