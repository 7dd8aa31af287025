package oracle

import (
	"strconv"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestMurmur2KafkaVectors checks murmur2 against the test vectors of
// Kafka's own implementation: UtilsTest.testMurmur2 in
// clients/src/test/java/org/apache/kafka/common/utils/UtilsTest.java
// (apache/kafka, commit 1eb7644349cb07139d6a3c1ad1986979647cac99), which
// asserts Utils.murmur2 returns these Java ints.
func TestMurmur2KafkaVectors(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want int32
	}{
		{"21", -973932308},
		{"foobar", -790332482},
		{"a-little-bit-long-string", -985981536},
		{"a-little-bit-longer-string", -1486304829},
		{"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971},
		{"abc", 479470107},
	} {
		if got := int32(murmur2([]byte(tc.in))); got != tc.want {
			t.Errorf("murmur2(%q) = %d, want %d", tc.in, got, tc.want)
		}
	}
}

// TestPartitionOfSignBit pins toPositive: the partition of a key whose
// hash is negative as a Java int is taken after clearing the sign bit, not
// after negating it (Math.abs would give another partition).
func TestPartitionOfSignBit(t *testing.T) {
	// murmur2("21") is -973932308, 0xc5f2f8ec; with the sign bit cleared
	// 1173551340, mod 7 = 3. Negated it would be 973932308, mod 7 = 6.
	if got := partitionOf([]byte("21"), 7); got != 3 {
		t.Fatalf("partitionOf(21, 7) = %d, want 3", got)
	}
	if got := partitionOf([]byte("anything"), 1); got != 0 {
		t.Fatalf("partitionOf with one partition = %d, want 0", got)
	}
}

// TestPartitionOfAgreesWithFranzGo cross-checks the user-id keys the load
// writes against franz-go's default (murmur2) partitioner, the one the load
// generator produces with: an oracle that disagreed with the producers would
// call every record misrouted.
func TestPartitionOfAgreesWithFranzGo(t *testing.T) {
	for _, n := range []int{1, 2, 3, 6, 7, 32} {
		p := kgo.StickyKeyPartitioner(nil).ForTopic("t")
		for user := range uint64(2000) {
			key := strconv.AppendUint(nil, user, 10)
			want := p.Partition(&kgo.Record{Key: key}, n)
			if got := partitionOf(key, int32(n)); int(got) != want {
				t.Fatalf("partitionOf(%q, %d) = %d, franz-go says %d", key, n, got, want)
			}
		}
	}
}
