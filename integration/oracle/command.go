package oracle

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"math"
	"strconv"
	"time"
)

// The reasons the README gives for dead-lettered records. They are the
// words the oracle expects in a DLQ record's cohortgate.reason header.
const (
	reasonCommandJSON         = "command_json"
	reasonCommandOp           = "command_op"
	reasonCommandUserMissing  = "command_user_missing"
	reasonCommandUserInvalid  = "command_user_invalid"
	reasonCommandUserMismatch = "command_user_mismatch"
	reasonCommandAtNs         = "command_at_ns"
	reasonCommandRequestID    = "command_request_id"
	reasonAtOutOfRange        = "command_at_out_of_range"
	reasonFutureSkew          = "command_future_skew"
	reasonRejoinBeforeLeave   = "rejoin_before_leave"
	reasonHistoryFull         = "history_full"
	reasonTimestampSkew       = "timestamp_future_skew"
	reasonTooLarge            = "record_too_large"
	// reasonKey stands for every key_* reason (C1, S1): the README names
	// only some of them (key_leading_zero, ...), so any key_ word is right.
	reasonKey = "key_*"
	// reasonCommandValue stands for every reason of rule C3: when a value
	// is wrong in several ways the README does not say which one wins.
	reasonCommandValue = "command_* (C3)"
)

// op is what a command asks for.
type op uint8

const (
	opLeave op = iota + 1
	opRejoin
)

func (o op) String() string {
	switch o {
	case opLeave:
		return "leave"
	case opRejoin:
		return "rejoin"
	}
	return "op(" + strconv.Itoa(int(o)) + ")"
}

// command is one decoded command value. requestID "" stands for an absent
// request_id (rule C5).
type command struct {
	op        op
	userID    uint64
	atNs      uint64
	hasAt     bool
	requestID string
}

// errNotObject is what members returns for anything but one JSON object
// with distinct member names.
var errNotObject = errors.New("oracle: not one JSON object with distinct member names")

// members decodes value as exactly one JSON object and returns its members,
// integers as json.Number (never float64, so 18446744073709551615 stays
// exact). It scans the object token by token so that a member named twice
// (which encoding/json would silently resolve to the last) is refused, as is
// trailing data after the object.
func members(value []byte) (map[string]any, error) {
	dec := json.NewDecoder(bytes.NewReader(value))
	dec.UseNumber()
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, errNotObject
	}
	out := make(map[string]any)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, errNotObject
		}
		name, ok := tok.(string)
		if !ok {
			return nil, errNotObject
		}
		if _, dup := out[name]; dup {
			return nil, errNotObject
		}
		var v any
		if err := dec.Decode(&v); err != nil {
			return nil, errNotObject
		}
		out[name] = v
	}
	if tok, err := dec.Token(); err != nil || tok != json.Delim('}') {
		return nil, errNotObject
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errNotObject
	}
	return out, nil
}

// uintMember reads a JSON integer in 0..2^64-1: digits only (no sign,
// fraction or exponent), exactly.
func uintMember(v any) (uint64, bool) {
	n, ok := v.(json.Number)
	if !ok || len(n) == 0 {
		return 0, false
	}
	for _, c := range []byte(n) {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	u, err := strconv.ParseUint(string(n), 10, 64)
	return u, err == nil
}

// decodeCommand decodes a command value whose key is the user id keyUser
// (rule C3). It returns the command, or the reason the value goes to the
// DLQ. A member that is null counts as absent; members the README does not
// name are ignored.
func decodeCommand(keyUser uint64, value []byte) (command, string) {
	m, err := members(value)
	if err != nil {
		return command{}, reasonCommandJSON
	}
	var c command
	switch s, _ := m["op"].(string); s {
	case "leave":
		c.op = opLeave
	case "rejoin":
		c.op = opRejoin
	default:
		return command{}, reasonCommandOp
	}
	user, present := m["user_id"]
	if !present || user == nil {
		return command{}, reasonCommandUserMissing
	}
	var ok bool
	if c.userID, ok = uintMember(user); !ok {
		return command{}, reasonCommandUserInvalid
	}
	if c.userID != keyUser {
		return command{}, reasonCommandUserMismatch
	}
	if at := m["at_ns"]; at != nil {
		if c.atNs, ok = uintMember(at); !ok {
			return command{}, reasonCommandAtNs
		}
		c.hasAt = true
	}
	if id := m["request_id"]; id != nil {
		if c.requestID, ok = id.(string); !ok {
			return command{}, reasonCommandRequestID
		}
	}
	return c, ""
}

// msToNs converts a Kafka record timestamp (ms since the Unix epoch) to ns,
// saturating at the ends of int64 instead of wrapping.
func msToNs(ms int64) int64 {
	const nsPerMs int64 = 1e6
	switch {
	case ms > math.MaxInt64/nsPerMs:
		return math.MaxInt64
	case ms < math.MinInt64/nsPerMs:
		return math.MinInt64
	}
	return ms * nsPerMs
}

// boundaryOf applies rule C4 to a decoded command with record timestamp
// tsMs: the boundary is at_ns, or the record timestamp in ns. It returns
// the boundary, or the reason the command goes to the DLQ: above 2^63-1 ns
// (or a missing at_ns with a negative timestamp) is out of range; more than
// skew ahead of the record's own timestamp is future skew.
func boundaryOf(c command, tsMs int64, skew time.Duration) (uint64, string) {
	var b uint64
	switch {
	case c.hasAt && c.atNs > math.MaxInt64:
		return 0, reasonAtOutOfRange
	case c.hasAt:
		b = c.atNs
	case tsMs < 0 || msToNs(tsMs) == math.MaxInt64:
		return 0, reasonAtOutOfRange
	default:
		b = uint64(msToNs(tsMs))
	}
	limit := msToNs(tsMs)
	if limit <= math.MaxInt64-int64(skew) {
		limit += int64(skew)
	} else {
		limit = math.MaxInt64
	}
	if int64(b) > limit {
		return 0, reasonFutureSkew
	}
	return b, ""
}
