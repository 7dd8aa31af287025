package oracle

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"strconv"
	"time"
)

// Record is one Kafka record as the oracle reads it, decoded from the wire
// by whoever reads Kafka (Verify does, with franz-go); the oracle itself
// never talks to Kafka.
type Record struct {
	Partition int32
	Offset    int64
	Key       []byte // nil: a null key
	Value     []byte
	Headers   []Header
	Timestamp int64 // Kafka's record timestamp, ms since the Unix epoch
}

// Header is one record header.
type Header struct {
	Key   string
	Value []byte
}

// header returns the value of r's first header named key.
func (r Record) header(key string) (string, bool) {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value), true
		}
	}
	return "", false
}

// Topics names the topics of a run: the five, and the input and output
// of each route beyond the first (Signals into Cohort).
type Topics struct {
	Commands, Signals, Cohort, DLQ, Changelog string
	// Routes are the further gated paths, as the processor's --route
	// IN=OUT after the first. Every input has the commands' partitions.
	Routes []Route
}

// Route is one gated path: signals read from Signals and forwarded to
// Cohort.
type Route struct {
	Signals, Cohort string
}

// routes returns every route, the first (Signals into Cohort) first.
func (t Topics) routes() []Route {
	return append([]Route{{t.Signals, t.Cohort}}, t.Routes...)
}

// names returns the topics in a fixed order.
func (t Topics) names() []string {
	names := []string{t.Commands, t.Signals, t.Cohort, t.DLQ, t.Changelog}
	for _, r := range t.Routes {
		names = append(names, r.Signals, r.Cohort)
	}
	return names
}

// Headers the processor writes (docs/client.md, "Record formats").
const (
	headerMisroutedFrom   = "cohortgate.misrouted.from"
	headerReason          = "cohortgate.reason"
	headerSourceTopic     = "cohortgate.source.topic"
	headerSourcePartition = "cohortgate.source.partition"
	headerSourceOffset    = "cohortgate.source.offset"
	headerOriginalReason  = "cohortgate.original.reason"
	headerOriginalSHA256  = "cohortgate.original.sha256"
)

// What a load may tell the oracle that Kafka cannot: a signal that
// carries the header HeaderExpect is judged by its value.
const (
	// HeaderExpect marks a signal the load knows more about than Kafka
	// records.
	HeaderExpect = "chaos.expect"
	// ExpectGated: the load produced the signal after Kafka had
	// acknowledged a leave of its user whose episode it lies in (and no
	// rejoin since), so promise 1 holds for it: forwarding it is a leak
	// even when a late-leave window covers it. The oracle checks the claim
	// against its model (Report.Contradictions).
	ExpectGated = "gated"
	// ExpectTimestampSkew: the signal's timestamp was further ahead of the
	// producer's clock than the processors' --max-future-skew, so rule S4
	// sends it to the DLQ (timestamp_future_skew).
	ExpectTimestampSkew = reasonTimestampSkew
)

// pos is where a record was read: partition and offset of its topic.
type pos struct {
	partition int32
	offset    int64
}

func (p pos) String() string {
	return strconv.Itoa(int(p.partition)) + "/" + strconv.FormatInt(p.offset, 10)
}

// signalID identifies a signal by what the cohort topic keeps of it: key,
// value and timestamp (a forwarded signal and a re-published copy keep all
// three). It is a SHA-256 prefix: 128 bits make a collision among a run's
// signals out of reach.
type signalID [16]byte

func idOf(r Record) signalID {
	h := sha256.New()
	var n [8]byte
	if r.Key == nil {
		h.Write([]byte{0})
	} else {
		h.Write([]byte{1})
		binary.BigEndian.PutUint64(n[:], uint64(len(r.Key)))
		h.Write(n[:])
		h.Write(r.Key)
	}
	binary.BigEndian.PutUint64(n[:], uint64(len(r.Value)))
	h.Write(n[:])
	h.Write(r.Value)
	binary.BigEndian.PutUint64(n[:], uint64(r.Timestamp))
	h.Write(n[:])
	var id signalID
	copy(id[:], h.Sum(nil))
	return id
}

// sha256Hex is the hex SHA-256 of b, as cohortgate.original.sha256 carries it.
func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// batchBytes is the size of a record batch (Kafka's format v2) that holds
// r alone, uncompressed: the 61-byte batch header and the record with its
// varint lengths. A topic refuses a batch larger than its
// max.message.bytes.
func batchBytes(r Record) int {
	body := 1 + 1 + 1 // attributes, timestamp delta 0, offset delta 0
	if r.Key == nil {
		body += varintLen(-1)
	} else {
		body += varintLen(int64(len(r.Key))) + len(r.Key)
	}
	body += varintLen(int64(len(r.Value))) + len(r.Value)
	body += varintLen(int64(len(r.Headers)))
	for _, h := range r.Headers {
		body += varintLen(int64(len(h.Key))) + len(h.Key) + varintLen(int64(len(h.Value))) + len(h.Value)
	}
	return 61 + varintLen(int64(body)) + body
}

// varintLen is the length of v as a zigzag varint.
func varintLen(v int64) int {
	u := uint64(v<<1) ^ uint64(v>>63)
	n := 1
	for u >= 0x80 {
		u >>= 7
		n++
	}
	return n
}

// eventTime is a signal's event time in ns: its record timestamp.
func eventTime(r Record) int64 { return msToNs(r.Timestamp) }

// formatNs renders ns since the epoch for a finding: the UTC time and the
// raw number.
func formatNs(ns int64) string {
	return time.Unix(0, ns).UTC().Format("15:04:05.000") + " (" + strconv.FormatInt(ns, 10) + ")"
}
