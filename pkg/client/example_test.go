package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/pkg/client"
	"github.com/cohortgate/cohortgate/topics"
)

// A user leaves: publish the leave, wait for the processor's receipt.
func Example() {
	brokers, stop, err := cohortgate() // a broker and a processor, in this process
	if err != nil {
		log.Fatal(err)
	}
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	c, err := client.New(client.Brokers(brokers...))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	sent, err := c.Leave(ctx, 42)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("published: %s of user %d to %s partition %d\n", sent.Command.Op, sent.Command.UserID, sent.Topic, sent.Partition)

	rec, err := c.WaitReceipt(ctx, sent)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("receipt: user %d %s since the boundary: %t; the command changed the state: %t\n",
		rec.UserID, rec.Status, rec.LeftAtNs != nil && *rec.LeftAtNs == sent.BoundaryNs(), rec.Command.Changed)
	// Output:
	// published: leave of user 42 to membership.commands partition 4
	// receipt: user 42 left since the boundary: true; the command changed the state: true
}

// A leave with an explicit boundary: the user asked to leave a second ago.
// Publishing the same command again (same boundary, same request id) is a
// no-op the receipt calls a duplicate.
func ExampleClient_Leave() {
	ctx, c, done := connected() // a client of a broker and processor in this process, as in Example
	defer done()

	at := time.Now().Add(-time.Second)
	for range 2 {
		sent, err := c.Leave(ctx, 7, client.Intent("ticket-7", at))
		if err != nil {
			log.Fatal(err)
		}
		rec, err := c.WaitReceipt(ctx, sent)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("left_at_ns is At: %t, changed: %t, duplicate: %t\n",
			rec.LeftAtNs != nil && *rec.LeftAtNs == uint64(at.UnixNano()), rec.Command.Changed, rec.Command.Duplicate)
	}
	// Output:
	// left_at_ns is At: true, changed: true, duplicate: false
	// left_at_ns is At: true, changed: false, duplicate: true
}

// Retry safely: one decision, named by the caller's key and the time it
// was taken, is one command however often it is published. The package
// documentation and docs/client.md show this example's code.
func ExampleIntent() {
	ctx, c, done := connected() // a client of a broker and processor in this process, as in Example
	defer done()

	// One decision: user 42 leaves, as ticket 4711 asked, from when it was
	// decided. Keep the key and the time with the decision.
	decidedAt := time.Now().Add(-time.Second)
	intent := client.Intent("ticket-4711", decidedAt)

	// Published twice (a retry after a timeout, a crash, a redeploy), it
	// is applied once.
	for range 2 {
		sent, err := c.Leave(ctx, 42, intent)
		if err != nil {
			log.Fatal(err) // safe to retry with the same intent
		}
		rec, err := c.WaitReceipt(ctx, sent)
		if err != nil {
			log.Fatal(err) // a *client.RefusedError if the processor refused it
		}
		fmt.Println(rec.Status, "changed:", rec.Command.Changed, "duplicate:", rec.Command.Duplicate)
		// LeftAtNs is nil while the user is active, and Receipt is nil on
		// a record that follows no command: check before reading them.
		if rec.LeftAtNs != nil && rec.Receipt != nil {
			fmt.Println("left from the decision:", *rec.LeftAtNs == uint64(decidedAt.UnixNano()),
				"signals partition:", rec.Receipt.SignalsPartition)
		}
	}
	// Output:
	// left changed: true duplicate: false
	// left from the decision: true signals partition: 4
	// left changed: false duplicate: true
	// left from the decision: true signals partition: 4
}

// Rejoin closes the open leave into the user's history.
func ExampleClient_Rejoin() {
	ctx, c, done := connected() // a client of a broker and processor in this process, as in Example
	defer done()

	left, err := c.Leave(ctx, 8, client.At(time.Now().Add(-time.Minute)))
	if err != nil {
		log.Fatal(err)
	}
	if _, err := c.WaitReceipt(ctx, left); err != nil {
		log.Fatal(err)
	}
	back, err := c.Rejoin(ctx, 8)
	if err != nil {
		log.Fatal(err)
	}
	rec, err := c.WaitReceipt(ctx, back)
	if err != nil {
		log.Fatal(err)
	}
	ep := rec.History[0]
	fmt.Printf("%s; episodes: %d, from the leave's boundary: %t, to the rejoin's: %t\n",
		rec.Status, len(rec.History), ep.LeftAtNs == left.BoundaryNs(), ep.RejoinedAtNs == back.BoundaryNs())
	// Output:
	// active; episodes: 1, from the leave's boundary: true, to the rejoin's: true
}

// A command the processor refuses comes back as a *RefusedError with the
// DLQ's reason: here a rejoin whose boundary lies before the open leave's.
func ExampleClient_WaitReceipt() {
	ctx, c, done := connected() // a client of a broker and processor in this process, as in Example
	defer done()

	now := time.Now()
	left, err := c.Leave(ctx, 9, client.At(now))
	if err != nil {
		log.Fatal(err)
	}
	if _, err := c.WaitReceipt(ctx, left); err != nil {
		log.Fatal(err)
	}
	back, err := c.Rejoin(ctx, 9, client.At(now.Add(-time.Hour)))
	if err != nil {
		log.Fatal(err)
	}
	_, err = c.WaitReceipt(ctx, back)
	var refused *client.RefusedError
	if errors.As(err, &refused) {
		fmt.Println("refused:", refused.Reason, errors.Is(err, topics.ErrRejoinBeforeLeave))
	}
	// Output:
	// refused: rejoin_before_leave true
}

// Status reads a user's latest changelog record; a user the processor
// never heard of is active.
func ExampleClient_Status() {
	ctx, c, done := connected() // a client of a broker and processor in this process, as in Example
	defer done()

	sent, err := c.Leave(ctx, 10)
	if err != nil {
		log.Fatal(err)
	}
	if _, err := c.WaitReceipt(ctx, sent); err != nil {
		log.Fatal(err)
	}
	for _, user := range []uint64{10, 11} {
		rec, err := c.Status(ctx, user)
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("user %d: %s, follows a command: %t\n", user, rec.Status, rec.Command != nil)
	}
	// Output:
	// user 10: left, follows a command: true
	// user 11: active, follows a command: false
}

// A service that already has a franz-go client publishes with it. Its
// partitioner must place keys as Kafka's default does; franz-go's default
// does.
func ExampleKafkaClient() {
	brokers, stop, err := cohortgate()
	if err != nil {
		log.Fatal(err)
	}
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	kc, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		log.Fatal(err)
	}
	defer kc.Close()
	c, err := client.New(client.KafkaClient(kc))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close() // leaves kc open

	sent, err := c.Leave(ctx, 42)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("partition", sent.Partition, "request_id generated:", sent.Command.RequestID != "")
	// Output:
	// partition 4 request_id generated: true
}

// connected starts a broker and a processor in this process, and returns a
// client of them with a 30s deadline, or exits; done stops all three.
func connected() (context.Context, *client.Client, func()) {
	brokers, stop, err := cohortgate()
	if err != nil {
		log.Fatal(err)
	}
	c, err := client.New(client.Brokers(brokers...))
	if err != nil {
		stop()
		log.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	return ctx, c, func() { cancel(); c.Close(); stop() }
}
