package fanout

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestKeyPartitionMatchesKafka checks keyPartition against murmur2 values
// from Apache Kafka's own tests (UtilsTest.testMurmur2): partition =
// (murmur2(key) & 0x7fffffff) % n.
func TestKeyPartitionMatchesKafka(t *testing.T) {
	kp := newKeyPartition()
	for _, tc := range []struct {
		key     string
		murmur2 int32
	}{
		{"21", -973932308},
		{"foobar", -790332482},
		{"a-little-bit-long-string", -985981536},
		{"a-little-bit-longer-string", -1486304829},
		{"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971},
		{"abc", 479470107},
	} {
		for _, n := range []int32{1, 3, 6, 7, 100} {
			want := int32(uint32(tc.murmur2)&0x7fffffff) % n
			if got := kp.of([]byte(tc.key), n); got != want {
				t.Errorf("of(%q, %d) = %d, want %d", tc.key, n, got, want)
			}
		}
	}
}

func TestPartitionerPins(t *testing.T) {
	tp := newPartitioner().ForTopic("t")
	r := &kgo.Record{Key: []byte("21")}
	byKey := tp.Partition(r, 6)
	pin(r, int32((byKey+1)%6))
	if got := tp.Partition(r, 6); got != (byKey+1)%6 {
		t.Fatalf("pinned record placed in %d, want %d", got, (byKey+1)%6)
	}
	if got := tp.Partition(&kgo.Record{Key: []byte("21")}, 6); got != byKey {
		t.Fatalf("unpinned record placed in %d, want %d", got, byKey)
	}
	// A produce context (franz-go sets one on every record) and a stale
	// Partition do not pin.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	other := &kgo.Record{Key: []byte("21"), Partition: int32((byKey + 1) % 6), Context: ctx}
	if got := tp.Partition(other, 6); got != byKey {
		t.Fatalf("record with a produce context placed in %d, want %d", got, byKey)
	}
	// A pinned partition beyond the topic's count falls back to the key.
	pin(r, 6)
	if got := tp.Partition(r, 6); got != byKey {
		t.Fatalf("record pinned out of range placed in %d, want %d", got, byKey)
	}
}
