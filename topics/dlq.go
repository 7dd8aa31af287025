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

// Headers of a truncated DLQ copy (reason record_too_large): the record, or
// its DLQ copy, was too large for the topic it had to go to, so the DLQ
// holds the key (cut to MaxTruncatedKey bytes), the original headers when
// they fit, and the head of the value, with these headers to identify the
// original.
const (
	// HeaderOriginalReason is the reason the record was dead-lettered for
	// before it proved too large, or "" for a valid record too large to
	// forward.
	HeaderOriginalReason = "cohortgate.original.reason"
	// HeaderOriginalSize is the original's key, value and header bytes, in
	// decimal.
	HeaderOriginalSize = "cohortgate.original.size"
	// HeaderOriginalSHA256 is the hex SHA-256 of the original value.
	HeaderOriginalSHA256 = "cohortgate.original.sha256"
	// HeaderOriginalHeaders is how many original headers were left out, in
	// decimal; present only when they did not fit.
	HeaderOriginalHeaders = "cohortgate.original.headers"
)

// MaxTruncatedKey bounds the key of a truncated DLQ copy, in bytes.
const MaxTruncatedKey = 1024

// Headers returns every header name the processor adds to a record, in a
// stable order: the DLQ's, the truncated copy's and HeaderMisroutedFrom.
func Headers() []string {
	return []string{
		HeaderReason, HeaderError, HeaderSourceTopic, HeaderSourcePartition, HeaderSourceOffset,
		HeaderOriginalReason, HeaderOriginalSize, HeaderOriginalSHA256, HeaderOriginalHeaders,
		HeaderMisroutedFrom, HeaderRestore,
	}
}

// HeaderMisroutedFrom marks a record the processor found in a partition
// other than the one Kafka's default partitioner gives its key, and
// re-published unchanged to that partition of the same topic. Its value is
// "partition/offset" of where it was found.
const HeaderMisroutedFrom = "cohortgate.misrouted.from"
