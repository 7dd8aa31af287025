package oracle

// murmur2 is Kafka's Utils.murmur2 (clients/src/main/java/org/apache/kafka/
// common/utils/Utils.java): MurmurHash2, 32 bits, seed 0x9747b28c, written
// here from that description so that the oracle shares no partitioner with
// the processor or its client library. Java's int arithmetic wraps like
// Go's uint32; its >>> is Go's >> on an unsigned value.
func murmur2(data []byte) uint32 {
	const (
		seed = 0x9747b28c
		m    = 0x5bd1e995
		r    = 24
	)
	length := len(data)
	h := uint32(seed) ^ uint32(length)
	for i := 0; i+4 <= length; i += 4 {
		k := uint32(data[i]) | uint32(data[i+1])<<8 | uint32(data[i+2])<<16 | uint32(data[i+3])<<24
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
	}
	tail := data[length&^3:]
	switch len(tail) {
	case 3:
		h ^= uint32(tail[2]) << 16
		fallthrough
	case 2:
		h ^= uint32(tail[1]) << 8
		fallthrough
	case 1:
		h ^= uint32(tail[0])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return h
}

// partitionOf is the partition Kafka's default partitioner gives key among
// n partitions: toPositive(murmur2(key)) % n, where toPositive clears the
// sign bit (Utils.toPositive, not Math.abs). n must be at least 1.
func partitionOf(key []byte, n int32) int32 {
	return int32((murmur2(key) & 0x7fffffff) % uint32(n))
}
