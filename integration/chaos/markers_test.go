package main

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestOnlyMarkers: a partition whose tail past an offset is a commit or
// abort marker (and aborted records) is decided there; one with a
// committed record, or an open transaction, is not.
func TestOnlyMarkers(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, "s"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	brokers := c.ListenAddrs()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	p, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.TransactionalID("t"), kgo.DefaultProduceTopic("s"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	end := func() int64 {
		t.Helper()
		ends, err := adm.ListEndOffsets(ctx, "s")
		if err != nil {
			t.Fatal(err)
		}
		o, _ := ends.Lookup("s", 0)
		return o.Offset
	}
	txn := func(commit kgo.TransactionEndTry, n int, end bool) {
		t.Helper()
		if err := p.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for range n {
			if err := p.ProduceSync(ctx, &kgo.Record{Value: []byte("v")}).FirstErr(); err != nil {
				t.Fatal(err)
			}
		}
		if end {
			if err := p.EndTransaction(ctx, commit); err != nil {
				t.Fatal(err)
			}
		}
	}
	check := func(from int64, want bool) {
		t.Helper()
		got, err := onlyMarkers(ctx, brokers, "s", 0, from, end())
		if err != nil || got != want {
			t.Fatalf("onlyMarkers from %d to %d = %v, %v; want %v", from, end(), got, err, want)
		}
	}

	txn(kgo.TryCommit, 2, true) // 0, 1, commit marker at 2
	check(2, true)              // the trailing commit marker
	check(1, false)             // a committed record
	check(end(), true)          // nothing at all
	txn(kgo.TryAbort, 3, true)  // 3..5 aborted, abort marker at 6
	check(2, true)
	txn(kgo.TryCommit, 1, false) // 7, in an open transaction
	check(2, false)
	if err := p.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	check(2, false) // 7 committed
	check(8, true)
}
