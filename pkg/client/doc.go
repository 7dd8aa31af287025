// Package client publishes cohortgate's membership commands — a user
// leaves, a user rejoins — and reads back what the processor made of them,
// over franz-go. It is for the services that decide a user leaves; the
// processor itself is pkg/fanout.
//
//	c, err := client.New(client.Brokers("kafka-1:9092"))
//	if err != nil {
//		log.Fatal(err)
//	}
//	defer c.Close()
//
//	// One decision: user 42 leaves, as ticket 4711 asked, from when it was
//	// decided. Keep the key and the time with the decision.
//	decidedAt := time.Now().Add(-time.Second)
//	intent := client.Intent("ticket-4711", decidedAt)
//
//	// Published twice (a retry after a timeout, a crash, a redeploy), it
//	// is applied once.
//	for range 2 {
//		sent, err := c.Leave(ctx, 42, intent)
//		if err != nil {
//			log.Fatal(err) // safe to retry with the same intent
//		}
//		rec, err := c.WaitReceipt(ctx, sent)
//		if err != nil {
//			log.Fatal(err) // a *client.RefusedError if the processor refused it
//		}
//		fmt.Println(rec.Status, "changed:", rec.Command.Changed, "duplicate:", rec.Command.Duplicate)
//		// LeftAtNs is nil while the user is active, and Receipt is nil on
//		// a record that follows no command: check before reading them.
//		if rec.LeftAtNs != nil && rec.Receipt != nil {
//			fmt.Println("left from the decision:", *rec.LeftAtNs == uint64(decidedAt.UnixNano()),
//				"signals partition:", rec.Receipt.SignalsPartition)
//		}
//	}
//
// This is ExampleIntent of the package's example_test.go, kept equal to it
// by a test; it runs, with the other examples, in the package's tests
// against an embedded broker and processor. go doc -all prints this
// package documentation; go doc -http, or the package's page on a Go
// documentation site, shows every runnable example.
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
// # Retrying safely
//
// A command's identity is (op, user, boundary, request id): the processor
// applies it once, and a copy published again changes nothing but says
// so ("duplicate": true in its receipt). A request id names one intent,
// and is reused only to retry that same intent, with the same boundary:
// the same request id with another boundary is another command, and one
// request id shared by two intents (leave, rejoin, leave again) makes the
// later a re-delivery of the earlier when their boundaries meet. [Intent]
// derives both from a key of the caller's — a ticket, a job id — and the
// time the decision took effect: keep the two with the decision, and
// publish with the same Intent to retry. A retry inside one [Client.Leave]
// call is the idempotent producer's business and never duplicates.
//
// # Reading back
//
// The processor stamps a command's changelog record, and its DLQ copy,
// with the command's own record timestamp, so the topics must keep
// producers' timestamps (CreateTime, Kafka's default). A Client has one
// receipt watcher: started by the first receipt waited for, it tails the
// changelog and the DLQ (read_committed, every partition, partitions
// added later included) from that command's timestamp on, and completes
// every waiter ([Client.WaitReceipt], [Client.ReceiptAsync],
// [Client.ApplyAsync], [Client.ApplyBatch]) by the position of its
// command ([Client.ApplyAsync] and [Client.ApplyBatch] start it before
// they stamp their first record). A command stamped before the
// watcher's start, one whose answer it has forgotten
// ([Unclaimed]), or a misrouted one is looked for by a scan: at most
// [Scans] readers at once, the waits queued for them sharing the next.
// [Client.Status] reads every changelog partition and returns the user's
// record that follows its latest command, on readers its calls share (at
// most [Scans], kept between calls).
//
// # In bulk
//
// [Client.PublishAsync] publishes without waiting (a callback per
// command), and [Client.ApplyAsync] with the receipt too;
// [Client.PublishBatch] and [Client.ApplyBatch] publish a slice of
// [Request], pipelined, the latter with every receipt. A job over many users gives each command
// [Intent] with the job's key and time, so that the job may run again. [Hooks] counts
// what the client sends and how long receipts take; [KafkaHooks] gives
// franz-go hooks (kprom) to every Kafka client it makes.
//
// A Client is safe for concurrent use. Close it when done; a caller's
// *kgo.Client is left open.
package client
