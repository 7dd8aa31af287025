// Package topics is the record contract of cohortgate: the names of its Kafka
// topics, what their keys and values hold, the command codec, the reasons a
// record is rejected and the headers that carry them to the dead-letter
// topic. It imports only the standard library, so producers, the processor
// and the purge job can share it.
//
// Everything here is a pure function or a constant: safe for concurrent use,
// with no state. The exported sentinel errors must not be modified.
//
// # Topics
//
// Each name is a default; [Set] carries the configured ones and
// [Set.Validate] checks them against Kafka's naming rules.
//
//	topic                 key          value                 notes
//	membership.commands   user id      JSON command          infinite retention; same partition count as signals
//	engagement.signals    user id      opaque bytes          record timestamp = event time
//	cohort.signals        as read      as read               signals of Active users: key, value, headers, timestamp unchanged
//	cohortgate.dlq        as read      as read               rejected records, with the cohortgate.* headers
//	membership.changelog  user id      JSON state + history  compacted; read by the purge job
//
// The commands topic is the source of truth for membership: the processor
// rebuilds a partition's state from it (from offset 0 if need be), so it is
// never deleted or compacted ([Set.Specs]). Both input topics are keyed by
// user id with Kafka's default (murmur2) partitioner and have the same
// partition count, so partition p of the commands holds every command for
// the users whose signals are in partition p of the signals.
//
// A changelog value is a [MemberRecord]: the user's status, open boundary,
// closed episodes and late-leave windows, with the command it follows and
// that command's [Receipt]. [AppendMemberRecord] writes it and
// [DecodeMemberRecord] reads it.
//
// # Keys
//
// Records of the commands, signals and changelog topics are keyed by user id
// in decimal ASCII: "0" or a digit 1-9 followed by digits, at most
// 18446744073709551615 (2^64-1). One spelling per id — no sign, space,
// leading zero or non-ASCII digit — so one user's records all hash to one
// partition. [ParseUserID] reads a key, [AppendUserID] writes one.
//
// # Commands
//
// A command value is one JSON object:
//
//	{"op":"leave","user_id":42,"at_ns":1764633600000000000,"request_id":"r-1"}
//
// Its members:
//
//   - op: required; "leave" or "rejoin".
//   - user_id: required; a JSON integer 0..2^64-1, equal to the key.
//   - at_ns: optional; the boundary, a JSON integer 0..2^64-1 in nanoseconds
//     since the Unix epoch (UTC). When absent, the record timestamp (Kafka's
//     milliseconds since the epoch, times 1e6) stands in; the caller does
//     that, this package never reads timestamps.
//   - request_id: optional; a UTF-8 string of at most [MaxRequestIDBytes]
//     bytes, echoed into the changelog.
//
// Other members are ignored, so producers may add fields. Member names are
// case-sensitive, a known member may not appear twice, null means absent.
// [DecodeCommand] states every rule and [AppendCommand] writes the canonical
// form, which DecodeCommand reads back to the same [Command].
//
// Leaving twice keeps the first boundary, and rejoining an Active user
// changes nothing, so replaying the commands topic is always safe; that is
// the processor's business, not the codec's.
//
// # Rejections and the DLQ
//
// A record that breaks the contract is not dropped: the processor copies it,
// key and value unchanged, to the DLQ topic with these headers and moves on.
//
//	cohortgate.reason            the Reason, e.g. "command_op"
//	cohortgate.error             the error text, for people
//	cohortgate.source.topic      the topic it was read from
//	cohortgate.source.partition  its partition, in decimal
//	cohortgate.source.offset     its offset, in decimal
//
// The constants [HeaderReason], [HeaderError], [HeaderSourceTopic],
// [HeaderSourcePartition] and [HeaderSourceOffset] spell them.
//
// Every rejection here is an *[Error] whose [Reason] is short, snake_case and
// stable; [ReasonOf] extracts it and errors.Is matches it against the
// sentinels (any key problem also matches [ErrKeyInvalid]). [Reasons] lists
// them all. Some reasons, rejoin_before_leave, history_full and
// timestamp_future_skew among them, are decided by the processor but defined here so that all reasons live in one
// place.
package topics
