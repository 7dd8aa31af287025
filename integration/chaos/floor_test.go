package main

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestFloorLine: the verdict on time is stall <= floor + floorSlack, and a
// floor that copied nothing gives none.
func TestFloorLine(t *testing.T) {
	for _, tc := range []struct {
		stall, floor time.Duration
		copies       int64
		want         string
	}{
		{stall: 4 * time.Second, floor: 2 * time.Second, copies: 1, want: "+ 3s met"},
		{stall: 5 * time.Second, floor: 2 * time.Second, copies: 1, want: "+ 3s met"},
		{stall: 5*time.Second + time.Millisecond, floor: 2 * time.Second, copies: 1, want: "+ 3s NOT met"},
		{stall: 5 * time.Second, copies: 0, want: "copied nothing"},
	} {
		r := result{stall: stall{longest: tc.stall, arrivals: 1}, floor: &stall{longest: tc.floor, arrivals: tc.copies}}
		if got := r.floorLine(); !strings.Contains(got, tc.want) {
			t.Errorf("stall %v, floor %v (%d copies): %q; want it to say %q", tc.stall, tc.floor, tc.copies, got, tc.want)
		}
	}
	if got := (result{}).floorLine(); got != "" {
		t.Errorf("a scenario without a floor: %q; want none", got)
	}
}

// TestPassthroughCopiesOnce: the floor's passthrough copies every record of
// its input into its output, read_committed, once.
func TestPassthroughCopiesOnce(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "in", "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	brokers := c.ListenAddrs()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.DefaultProduceTopic("in"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const n = 200
	for i := range n {
		if err := cl.ProduceSync(ctx, &kgo.Record{Key: []byte(strconv.Itoa(i)), Value: []byte(strconv.Itoa(i))}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	pctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() {
		done <- passthrough(pctx, brokers, "floor-test", "floor-test", "in", "out", 6*time.Second, t.Logf)
	}()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("passthrough: %v", err)
		}
	}()
	out, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics("out"),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	seen := make(map[string]int)
	for len(seen) < n && ctx.Err() == nil {
		out.PollFetches(ctx).EachRecord(func(r *kgo.Record) { seen[string(r.Value)]++ })
	}
	for i := range n {
		if k := seen[strconv.Itoa(i)]; k != 1 {
			t.Errorf("record %d copied %d times; want once", i, k)
		}
	}
}
