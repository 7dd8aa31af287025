package topics

// Headers the processor adds to a record it sends to the DLQ. The DLQ
// record's key and value are the rejected record's, byte for byte.
const (
	// HeaderReason is the Reason, such as "command_op".
	HeaderReason = "cohortgate.reason"
	// HeaderError is the error text for people, as Error.Error returns it.
	HeaderError = "cohortgate.error"
	// HeaderSourceTopic is the topic the rejected record was read from.
	HeaderSourceTopic = "cohortgate.source.topic"
	// HeaderSourcePartition is its partition, in decimal.
	HeaderSourcePartition = "cohortgate.source.partition"
	// HeaderSourceOffset is its offset, in decimal.
	HeaderSourceOffset = "cohortgate.source.offset"
)

// HeaderMisroutedFrom marks a record the processor found in a partition
// other than the one Kafka's default partitioner gives its key, and
// re-published unchanged to that partition of the same topic. Its value is
// "partition/offset" of where it was found.
const HeaderMisroutedFrom = "cohortgate.misrouted.from"
