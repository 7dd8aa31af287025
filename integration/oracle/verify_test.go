package oracle

import (
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestVerifyOnKafka runs Verify against an in-process kfake broker: it
// must read only what is committed (finding 1: an aborted leave takes no
// effect, a committed transactional one does), and count a transaction
// still open after the grace as hanging, without reading what it holds.
func TestVerifyOnKafka(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	brokers := c.ListenAddrs()
	topics := Topics{Commands: "v.commands", Signals: "v.signals", Cohort: "v.cohort", DLQ: "v.dlq", Changelog: "v.changelog"}

	client := func(opts ...kgo.Opt) *kgo.Client {
		cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner())}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(cl.Close)
		return cl
	}
	plain := client()
	if _, err := kadm.NewClient(plain).CreateTopics(ctx, testParts, 1, nil, topics.names()...); err != nil {
		t.Fatal(err)
	}
	rec := func(topic string, user uint64, value string, ms int64) *kgo.Record {
		key := []byte(strconv.FormatUint(user, 10))
		return &kgo.Record{Topic: topic, Partition: partitionOf(key, testParts), Key: key, Value: []byte(value), Timestamp: time.UnixMilli(ms)}
	}
	leave := func(user uint64, ms int64) *kgo.Record {
		return rec(topics.Commands, user, fmt.Sprintf(`{"op":"leave","user_id":%d,"at_ns":%d}`, user, ms*1e6), ms)
	}
	produce := func(cl *kgo.Client, rs ...*kgo.Record) {
		t.Helper()
		if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	inTxn := func(id string, commit kgo.TransactionEndTry, rs ...*kgo.Record) {
		t.Helper()
		cl := client(kgo.TransactionalID(id))
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		produce(cl, rs...)
		if err := cl.EndTransaction(ctx, commit); err != nil {
			t.Fatal(err)
		}
	}

	produce(plain, leave(1, 100))
	inTxn("aborted", kgo.TryAbort, leave(2, 100))
	inTxn("committed", kgo.TryCommit, leave(3, 100))
	s1, s2, s3, s4 := rec(topics.Signals, 1, "s1", 150), rec(topics.Signals, 2, "s2", 150), rec(topics.Signals, 3, "s3", 150), rec(topics.Signals, 4, "s4", 10)
	produce(plain, s1, s2, s3, s4)
	fwd := func(r *kgo.Record) *kgo.Record { cp := *r; cp.Topic = topics.Cohort; return &cp }
	produce(plain, fwd(s2), fwd(s4))
	produce(plain, rec(topics.Changelog, 1, `{"user_id":1,"status":"left","left_at_ns":100000000,"history":[],"late_leaves":[]}`, 0),
		rec(topics.Changelog, 3, `{"user_id":3,"status":"left","left_at_ns":100000000,"history":[],"late_leaves":[]}`, 0))

	open := client(kgo.TransactionalID("open"))
	if err := open.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	produce(open, fwd(s1)) // a leak, were it ever committed
	defer func() { _ = open.EndTransaction(context.Background(), kgo.TryAbort) }()

	rep, err := Verify(ctx, brokers, topics, &Options{Grace: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Hanging != 1 || len(rep.HangingDetail) != 1 || rep.Damage() != 1 {
		t.Fatalf("hanging %d %v, damage %d, want one open transaction and nothing else\n%s", rep.Hanging, rep.HangingDetail, rep.Damage(), rep.Details())
	}
	if rep.CommandsIn != 2 || rep.Applied != 2 || rep.SignalsIn != 4 || rep.Expected != 2 || rep.Forwarded != 2 || rep.ChangelogUsers != 2 {
		t.Fatalf("report %+v: want the two committed leaves applied, 2 of 4 signals expected and forwarded", rep)
	}

	// Records an output held before it was deleted and created again are
	// judged with it: s4 delivered there too is a duplicate, s1 a leak.
	gone := []Record{RecordOf(fwd(s4)), RecordOf(fwd(s1))}
	rep, err = Verify(ctx, brokers, topics, &Options{Grace: 300 * time.Millisecond, Deleted: map[string][]Record{topics.Cohort: gone}})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Duplicates != 1 || rep.Leaked != 1 {
		t.Fatalf("with the deleted output's records: duplicates %d, leaked %d; want 1 and 1\n%s", rep.Duplicates, rep.Leaked, rep.Details())
	}
	if _, err := Verify(ctx, brokers, topics, &Options{Grace: 300 * time.Millisecond, Deleted: map[string][]Record{topics.Changelog: nil}}); err == nil {
		t.Fatal("Verify took a deleted changelog's records")
	}
}
