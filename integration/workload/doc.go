// Package workload is cohortgate's seeded test load: a friendly part that a
// correct processor gates exactly, and a hostile mix of what real
// producers do. The chaos harness (integration/chaos), the load generator
// (integration/loadgen) and the benchmark harness (integration/bench) use it; nothing in
// the processor does. What a processor
// made of a load is judged by integration/oracle, which shares no code with
// this package or the processor.
//
// # Plan
//
// [NewPlan] turns a [Config] into a [Plan]: for each signal, in order, the
// user it belongs to, and the points in that sequence at which users leave
// and (later) rejoin; and the hostile scenes. The same Config, seed
// included, always gives the same Plan (the hostile mix draws from a random
// stream of its own, so a seed's friendly load is the same with or without
// it). User ids are 1..Users. Of the users, LeavePct percent leave once,
// at a uniformly chosen point; RejoinPct percent (chosen among the leavers)
// rejoin at a later point; and one leaver in eight sends its leave a
// second time before rejoining, which must change nothing (leaving twice
// keeps the first boundary).
//
// Signal number seq carries the value "sig-<seq>-" padded with '.' to
// ValueSize bytes ([AppendValue], [ParseSignalID]); the hostile scenes'
// signals take the ids after the friendly ones ([Progress.SignalIDs]).
//
// # The friendly load
//
// [Produce] writes the friendly load with Clients.Load, keyed by decimal
// user id with the client's partitioner (franz-go's default, murmur2, like
// Kafka's Java client). Signals go asynchronously, stamped with the wall
// clock when they are handed to the client. A command is stamped with at_ns
// = the wall clock just before it is produced and is produced
// synchronously: the next signal is produced only after Kafka has
// acknowledged it. Every signal produced after a command therefore has an
// event time after the command's acknowledgement (to the millisecond:
// Kafka timestamps are milliseconds), so the processor's alignment rule
// (README, rule S5) makes the command gate it whenever the grace is at
// least a millisecond: with this load, a correct processor leaks nothing
// and loses nothing. Signals produced before a command have event times
// before its boundary and are forwarded, however late they arrive. A
// signal produced while its user's leave stands, stamped at or after its
// boundary, carries the header chaos.expect: gated (oracle.ExpectGated):
// promise 1 holds for it, so the oracle counts it leaked if forwarded,
// whatever late-leave window covers it.
//
// # The hostile mix
//
// [Hostile] adds scenes, seeded, spread evenly over the friendly load
// (Scene.At), played one after the other by a goroutine of Produce with
// Clients.Hostile (records to the partitions the scene names, uncompressed,
// batches up to 1 MiB) and Clients.Txn (transactional). Each scene has
// users of its own, above Config.Users; every record goes out
// synchronously. The kinds ([Kind]), weighed by Hostile.Shares:
//
//   - misroute: a leave and signals produced to the key's CRC32 partition
//     (librdkafka's default partitioner), which the processor must
//     re-publish; the users are chosen so that it differs from murmur2.
//   - txn-held: a transactional producer writes a leave and holds the
//     transaction open for Hold/2..Hold, while two other users of the same
//     partition leave (plain producer) and go on sending signals, marked
//     gated. A processor that observes the last stable offset instead of the
//     high watermark forwards them: that is what control-lso must show.
//   - txn-abort: a leave in a transaction that is aborted; the user's
//     signals must all be forwarded.
//   - redeliver: commands delivered again: the same record (a producer
//     retry or re-publish: leave@a, rejoin@b, leave@(a+b)/2 clamped to b,
//     rejoin@d, then that leave again, which must change nothing, and once
//     re-opened a leave: TestRedeliveredLeaveAfterRejoin) and a leave again with a new request id (a new
//     command by rule C5, changing nothing).
//   - late-leave: a leave stamped Grace+0.5s..3s in the past after the
//     user's signals of that span (acknowledged after the grace: a
//     late-leave window), and a second leave with a boundary a second
//     beyond the grace before the first (the earliest boundary wins).
//   - same-ms: a leave and a rejoin without at_ns, stamped in one
//     millisecond: an empty episode, which holds no signal.
//   - future: a leave whose at_ns is its timestamp + MaxFutureSkew + 1h
//     (dead-lettered, command_future_skew), and a signal stamped
//     MaxFutureSkew + 5min ahead (Kafka 4 refuses timestamps more than an
//     hour ahead; dead-lettered, timestamp_future_skew; marked chaos.expect
//     so that the oracle knows, as Kafka does not record the producer's
//     clock).
//   - poison: on both inputs, records every rule dead-letters: an oversize
//     bad-JSON command (3/4 of LargeBytes, about 800 KB, in its partition
//     and misrouted), malformed values, at_ns 2^64-1 and 2^63, bad keys;
//     signals with bad keys (one of LargeBytes, about 1 MB), and a valid
//     signal of LargeBytes-20000 bytes, above franz-go's default batch
//     limit and under Kafka's default max.message.bytes.
//
// What the mix never does, because the oracle could not judge it: it never
// re-delivers a rejoin with a new request id, never misroutes a rejoin,
// never puts one in a transaction, and never stamps one in the past beyond
// the grace. A late rejoin (or one whose effect is delayed) makes the
// processor drop signals that the final state allows, and from Kafka alone
// that is indistinguishable from losing them. Nor does a late leaver
// rejoin: a rejoin before its window is recorded could leave an exact
// window with no signal of a final episode in it, which the oracle would
// call spurious.
package workload
