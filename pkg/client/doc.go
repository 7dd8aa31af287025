// Package client publishes cohortgate's membership commands — a user
// leaves, a user rejoins — and reads back what the processor made of them,
// over franz-go. It is for the services that decide a user leaves; the
// processor itself is pkg/fanout.
//
//	c, err := client.New(client.Brokers("kafka-1:9092"))
//	...
//	sent, err := c.Leave(ctx, 42)                 // acknowledged by Kafka
//	rec, err := c.WaitReceipt(ctx, sent)          // applied by the processor
//	fmt.Println(rec.Status, *rec.LeftAtNs)        // left 1764633600000000000
//
// # What it gets right by construction
//
//   - The key is the user id in decimal ASCII ([topics.AppendUserID]), and
//     the value the canonical command JSON ([topics.AppendCommand]).
//   - The partition is Kafka's default for the key: murmur2, as Java's
//     producer and the processor compute it. A client built here uses
//     franz-go's StickyKeyPartitioner(nil); with a caller's *kgo.Client
//     ([KafkaClient]) every publish checks where the record landed and
//     returns a [*MisroutedError] when the caller's partitioner put it
//     elsewhere (the processor re-publishes such a record to its key's
//     partition, and the command counts only from then).
//   - Every command carries a request_id: the caller's ([RequestID]) or a
//     random one. The processor echoes it into the changelog.
//   - A receipt belongs to exactly one command: [Client.WaitReceipt]
//     returns the changelog record (or DLQ record) that names the
//     command's own topic, partition and offset, never one of an earlier
//     command with the same request id.
//
// # Boundaries and clocks
//
// A command's boundary is its at_ns, or, when it has none, its record
// timestamp. By default the client sends no at_ns: it stamps the record
// with its clock ([Clock], default time.Now) at publish, and that
// timestamp, in milliseconds, is the boundary. [At] sets an explicit
// boundary instead; the client checks it against the same clock it stamps
// the record with, and refuses a boundary more than [MaxAhead] ahead of
// it, which the processor would dead-letter (command_future_skew), or one
// before the Unix epoch.
//
// A command's identity is (op, user, boundary, request id): the processor
// applies it once, and a copy published again changes nothing. To retry a
// command safely after a crash of the publisher, give it the same
// [RequestID] and [At] again; a retry inside one [Client.Leave] call is the
// idempotent producer's business and never duplicates.
//
// # Reading back
//
// [Client.WaitReceipt] reads the changelog (and the DLQ) from the command's
// record timestamp on — the processor stamps a command's changelog record,
// and its DLQ copy, with the command's own record timestamp, so the topics
// must keep producers' timestamps (CreateTime, Kafka's default) — until the
// record that follows the command appears. [Client.Status] reads every
// changelog partition and returns the user's record that follows its
// latest command. Both read with a client of their own,
// read_committed, made from the same connection settings and closed before
// they return, so they may run concurrently with each other and with
// publishes.
//
// A Client is safe for concurrent use. Close it when done; a caller's
// *kgo.Client is left open.
package client
