package fanout

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/topics"
)

// TestWindowsRecoveredBeforeTheFirstCommand: a new owner recovers its
// predecessors' late-leave windows as soon as it takes a partition, not on
// the partition's first command. That read goes read_committed to the
// changelog's end and waits for any transaction open on the changelog
// (this processor's own cycle, another owner's, a stuck producer's); made
// by the first leave, the wait stood between that leave and the gate.
// Here a transaction is left open on the changelog after the owner took
// its partition: a leave must still close the gate.
func TestWindowsRecoveredBeforeTheFirstCommand(t *testing.T) {
	c, set := fakeCluster(t, 1)
	recovered := make(chan WindowsRecoveredInfo, 4)
	p := readyOnFake(t, c, set, Config{
		CreateTopics: true, Partitions: 1,
		ExactlyOnce: true, TransactionalID: "recover-test", Grace: 10 * time.Millisecond,
		EventListener: EventListener{WindowsRecovered: func(i WindowsRecoveredInfo) {
			select {
			case recovered <- i:
			default:
			}
		}},
	})
	select {
	case <-recovered:
	case <-time.After(20 * time.Second):
		t.Fatal("the windows were not recovered within 20s of the partition's assignment, with no command yet")
	}

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stuck, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.TransactionalID("stuck-on-the-changelog"))
	if err != nil {
		t.Fatal(err)
	}
	defer stuck.Close()
	if err := stuck.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	open := &kgo.Record{Topic: string(set.Changelog), Key: []byte("99"), Value: []byte(`{}`)}
	if err := stuck.ProduceSync(ctx, open).FirstErr(); err != nil {
		t.Fatal(err)
	}
	defer stuck.EndTransaction(context.Background(), kgo.TryAbort) //nolint:errcheck // the test is over

	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	const user = 7
	at := time.Now()
	leave := &kgo.Record{Topic: string(set.Commands), Key: []byte(strconv.Itoa(user)), Timestamp: at,
		Value: topics.AppendCommand(nil, topics.Command{Op: topics.Leave, UserID: user, AtNs: uint64(at.UnixNano()), HasAt: true})}
	if err := cl.ProduceSync(ctx, leave).FirstErr(); err != nil {
		t.Fatal(err)
	}
	after := uint64(at.Add(time.Second).UnixNano())
	waitFor(t, "the leave in force in the gate while a transaction stays open on the changelog", func() bool {
		return !p.gate.Allows(user, after)
	})
}
