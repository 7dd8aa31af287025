package workload

import (
	"hash/crc32"
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"
)

// userKey is the record key of a user: its decimal id.
func userKey(user uint64) []byte { return strconv.AppendUint(nil, user, 10) }

// murmurPartition is the partition Kafka's default partitioner (murmur2,
// franz-go's default) gives key among n.
func murmurPartition(key []byte, n int32) int32 {
	return int32(kgo.StickyKeyPartitioner(nil).ForTopic("").Partition(&kgo.Record{Key: key}, int(n)))
}

// crcPartition is the partition librdkafka's default partitioner
// (consistent_random: CRC32 of the key) gives key among n: what kcat and
// confluent-kafka clients do unless told to use murmur2.
func crcPartition(key []byte, n int32) int32 {
	return int32(crc32.ChecksumIEEE(key) % uint32(n))
}
