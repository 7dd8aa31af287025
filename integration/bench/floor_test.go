package main

import (
	"context"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/topics"
)

// TestFloorWatch: the floor consumer sees each acknowledged leave once,
// by its request id, at a poll after its acknowledgement.
func TestFloorWatch(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, "commands"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	f, err := watchFloor(c.ListenAddrs(), "commands")
	if err != nil {
		t.Fatal(err)
	}
	defer f.stop()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	acks := make(map[string]time.Time)
	for u := uint64(1); u <= 5; u++ {
		id := "leave-" + string(rune('a'+u))
		cmd := topics.Command{Op: topics.Leave, UserID: u, AtNs: 1, HasAt: true, RequestID: id}
		rec := &kgo.Record{Topic: "commands", Key: topics.AppendUserID(nil, u), Value: topics.AppendCommand(nil, cmd)}
		if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
			t.Fatal(err)
		}
		acks[id] = time.Now()
	}
	f.wait(ctx, acks, 20*time.Second)
	got := f.floors(acks)
	if len(got) != len(acks) {
		t.Fatalf("%d of %d leaves polled", len(got), len(acks))
	}
	for _, d := range got {
		if d < -time.Second || d > 20*time.Second {
			t.Errorf("floor %v: not a poll after its acknowledgement", d)
		}
	}
}
