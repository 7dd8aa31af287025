package fanout

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"
)

// pinned is the Context of a record whose Partition was chosen by the
// processor: a misrouted input re-published to the partition that owns its
// key, or a changelog record. A distinct type rather than a context value:
// the partitioner runs for every record, and a type check costs a compare
// where Context.Value walks the produce context's chain.
type pinned struct {
	context.Context
	alone bool // produced in a batch of its own: see loop.produceAlone
}

// pin sends r to partition rather than to its key's partition.
func pin(r *kgo.Record, partition int32) {
	r.Partition = partition
	r.Context = pinned{Context: context.Background()}
}

// isPinned reports whether pin chose r's partition.
func isPinned(r *kgo.Record) bool {
	_, ok := r.Context.(pinned)
	return ok
}

// partitioner routes every record by Kafka's default key hash (murmur2,
// masked, modulo the partition count) unless it was pinned.
type partitioner struct{ byKey kgo.Partitioner }

func newPartitioner() kgo.Partitioner {
	return partitioner{byKey: kgo.StickyKeyPartitioner(nil)}
}

func (p partitioner) ForTopic(t string) kgo.TopicPartitioner {
	return topicPartitioner{p.byKey.ForTopic(t)}
}

type topicPartitioner struct{ byKey kgo.TopicPartitioner }

func (t topicPartitioner) RequiresConsistency(*kgo.Record) bool { return true }

func (t topicPartitioner) Partition(r *kgo.Record, n int) int {
	if isPinned(r) && int(r.Partition) < n {
		return int(r.Partition)
	}
	return t.byKey.Partition(r, n)
}

// keyPartition computes the partition Kafka's default partitioner gives a
// key: what Java clients and franz-go pick. librdkafka clients (kcat,
// confluent-kafka-*) pick CRC32 unless configured otherwise. A keyPartition
// is used by one goroutine: it reuses one record to stay allocation-free.
type keyPartition struct {
	tp      kgo.TopicPartitioner
	scratch *kgo.Record
}

func newKeyPartition() keyPartition {
	return keyPartition{tp: kgo.StickyKeyPartitioner(nil).ForTopic(""), scratch: new(kgo.Record)}
}

// of returns key's partition among n.
func (k keyPartition) of(key []byte, n int32) int32 {
	k.scratch.Key = key
	if key == nil {
		k.scratch.Key = []byte{} // a nil key would be placed stickily, not hashed
	}
	p := int32(k.tp.Partition(k.scratch, int(n)))
	k.scratch.Key = nil
	return p
}
