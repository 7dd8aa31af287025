package client

import (
	"context"
	"testing"

	"github.com/cohortgate/cohortgate/topics"
)

// TestPartitionOfIsCheap: placing a key costs no partitioner of its own.
// One made per command seeded a random source (4.9 kB, for keyless
// records) and took half the CPU of a bulk job publishing 100,000 leaves
// (81 s of CPU for 1,000,000 before, 32 s after).
func TestPartitionOfIsCheap(t *testing.T) {
	c, err := New(Brokers("127.0.0.1:1"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	topic := topics.Defaults().Commands
	c.mu.partitions[topic] = 6 // cached: no broker asked
	key := topics.AppendUserID(nil, 42)
	ctx := context.Background()
	want, err := c.partitionOf(ctx, topic, key, false)
	if err != nil {
		t.Fatal(err)
	}
	if want != 4 { // murmur2("42") % 6, as Kafka's Java client places it
		t.Errorf("key 42 in partition %d of 6, want 4", want)
	}
	allocs := testing.AllocsPerRun(100, func() {
		if p, _ := c.partitionOf(ctx, topic, key, false); p != want {
			t.Fatalf("key 42 moved to partition %d", p)
		}
	})
	if allocs > 1 {
		t.Errorf("partitionOf allocates %.0f times per key, want at most 1 (the record it hashes)", allocs)
	}
}
