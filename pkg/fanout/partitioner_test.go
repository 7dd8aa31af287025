package fanout

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
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

func TestRewriteTxnOffsets(t *testing.T) {
	req := kmsg.NewPtrTxnOffsetCommitRequest()
	for _, topic := range []string{"signals", "other"} {
		rt := kmsg.NewTxnOffsetCommitRequestTopic()
		rt.Topic = topic
		for p := int32(0); p < 3; p++ {
			rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
			rp.Partition, rp.Offset, rp.LeaderEpoch = p, 100, 1
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
	}
	rewriteTxnOffsets(req, "signals", map[int32]position{
		0: {held: true, at: kgo.EpochOffset{Epoch: 2, Offset: 40}, meta: "7"},
		1: {meta: "8", refresh: true},
		5: {meta: "9", refresh: true},  // no new records: committed again with its new metadata
		6: {meta: "10"},                // no new records, metadata unchanged: left out
		7: {meta: "11", refresh: true}, // never committed: nothing to commit
	}, map[int32]kgo.EpochOffset{5: {Epoch: 3, Offset: 55}, 6: {Epoch: 3, Offset: 66}})
	sig := req.Topics[0].Partitions
	if sig[0].Offset != 40 || sig[0].LeaderEpoch != 2 || *sig[0].Metadata != "7" {
		t.Errorf("held partition: %+v", sig[0])
	}
	if sig[1].Offset != 100 || *sig[1].Metadata != "8" {
		t.Errorf("unheld partition: %+v", sig[1])
	}
	if sig[2].Offset != 100 || sig[2].Metadata != nil {
		t.Errorf("partition without a position: %+v", sig[2])
	}
	if len(sig) != 4 || sig[3].Partition != 5 || sig[3].Offset != 55 || sig[3].LeaderEpoch != 3 || *sig[3].Metadata != "9" {
		t.Errorf("refreshed partitions: %+v, want partition 5 added at its committed offset", sig[3:])
	}
	if other := req.Topics[1].Partitions[0]; other.Offset != 100 || other.Metadata != nil || len(req.Topics[1].Partitions) != 3 {
		t.Errorf("other topic touched: %+v", req.Topics[1].Partitions)
	}
}
