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

// TestCoordinatorPartition checks the hash against values of Java's
// String.hashCode (the broker's), including an overflow to MinInt32
// and a character outside the basic plane (two UTF-16 units).
func TestCoordinatorPartition(t *testing.T) {
	if javaHashForTest("chaos-0f3c4160-broker-coordinator-a") >= 0 {
		t.Fatal("the negative case's hash is not negative")
	}
	for _, c := range []struct {
		key  string
		n    int
		want int
	}{
		{"", 50, 0},
		{"abc", 50, 96354 % 50},
		{"hello", 50, 99162322 % 50},
		{"hello", 3, 99162322 % 3},
		{"polygenelubricants", 50, 0}, // hashCode is MinInt32, which Kafka's Utils.abs makes 0
		{"Aa", 7, 2112 % 7},           // "Aa" and "BB" collide in Java
		{"BB", 7, 2112 % 7},
		{"\U0001F600", 50, (0xD83D*31 + 0xDE00) % 50},
		{"cohortgate-floor", 50, absForTest(javaHashForTest("cohortgate-floor")) % 50},
		// A negative hash: its absolute value, not its sign bit cleared.
		{"chaos-0f3c4160-broker-coordinator-a", 3, absForTest(javaHashForTest("chaos-0f3c4160-broker-coordinator-a")) % 3},
	} {
		if got := coordinatorPartition(c.key, c.n); got != c.want {
			t.Errorf("coordinatorPartition(%q, %d) = %d, want %d", c.key, c.n, got, c.want)
		}
	}
}

// javaHashForTest is String.hashCode as its documentation states it,
// s[0]*31^(n-1) + ... + s[n-1] over UTF-16 units, in 64 bits reduced to
// 32 at the end, which is not how the code under test computes it.
func javaHashForTest(s string) int32 {
	var h int64
	for _, r := range s {
		if r > 0xFFFF {
			panic("basic plane only")
		}
		h = (h*31 + int64(r)) & 0xFFFFFFFF
	}
	return int32(uint32(h))
}

func absForTest(h int32) int {
	if h < 0 {
		return -int(h)
	}
	return int(h)
}

// TestSameCoordinator checks that the floor's names land on the
// processors' partitions, with the base name kept when it already does.
func TestSameCoordinator(t *testing.T) {
	for _, n := range []int{1, 3, 50} {
		for _, match := range []string{"chaos-1796642177-broker-coordinator", "g", "group-a-b"} {
			got := sameCoordinator(match+"-floor", match, n)
			if coordinatorPartition(got, n) != coordinatorPartition(match, n) {
				t.Errorf("n=%d: %q is on partition %d, %q on %d", n, got, coordinatorPartition(got, n), match, coordinatorPartition(match, n))
			}
			if coordinatorPartition(match+"-floor", n) == coordinatorPartition(match, n) && got != match+"-floor" {
				t.Errorf("n=%d: %q renamed to %q though it already matched", n, match+"-floor", got)
			}
		}
	}
}
