package topics

import (
	"errors"
	"strconv"
	"unicode/utf8"
)

// Error is a rejected record. Reason is machine-readable and goes into the
// [HeaderReason] DLQ header; Detail says, for a person, what was wrong and
// where, quoting at most a bounded prefix of the offending bytes.
type Error struct {
	Reason Reason
	Detail string
}

// Error returns "topics: <reason>: <detail>", or "topics: <reason>" when
// Detail is empty.
func (e *Error) Error() string {
	if e.Detail == "" {
		return "topics: " + string(e.Reason)
	}
	return "topics: " + string(e.Reason) + ": " + e.Detail
}

// Is reports whether target is an *Error with the same Reason (Detail is not
// compared), so that errors.Is(err, ErrCommandOp) works for any op problem.
// Every key reason also matches [ErrKeyInvalid].
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	if !ok {
		return false
	}
	return t.Reason == e.Reason || (t.Reason == ReasonKeyInvalid && e.Reason.isKey())
}

// ReasonOf returns the Reason of the first *Error in err's chain, or "" if
// there is none.
func ReasonOf(err error) Reason {
	var e *Error
	if errors.As(err, &e) {
		return e.Reason
	}
	return ""
}

// Sentinels, one per Reason, for errors.Is. Each is an *Error with only
// Reason set; returned errors carry a Detail too. Do not modify them.
var (
	// ErrKeyInvalid matches every key rejection: ErrKeyEmpty,
	// ErrKeyNotDecimal, ErrKeyLeadingZero and ErrKeyOverflow.
	ErrKeyInvalid = &Error{Reason: ReasonKeyInvalid}
	// ErrKeyEmpty: the key is empty or null.
	ErrKeyEmpty = &Error{Reason: ReasonKeyEmpty}
	// ErrKeyNotDecimal: the key has a byte other than '0'..'9'.
	ErrKeyNotDecimal = &Error{Reason: ReasonKeyNotDecimal}
	// ErrKeyLeadingZero: the key is more than one byte and starts with '0'.
	ErrKeyLeadingZero = &Error{Reason: ReasonKeyLeadingZero}
	// ErrKeyOverflow: the key is above 18446744073709551615.
	ErrKeyOverflow = &Error{Reason: ReasonKeyOverflow}

	// ErrCommandJSON: the command value is not a single JSON object, or
	// repeats a member.
	ErrCommandJSON = &Error{Reason: ReasonCommandJSON}
	// ErrCommandOp: op is missing or not "leave" or "rejoin".
	ErrCommandOp = &Error{Reason: ReasonCommandOp}
	// ErrCommandUserMissing: user_id is missing or null.
	ErrCommandUserMissing = &Error{Reason: ReasonCommandUserMissing}
	// ErrCommandUserInvalid: user_id is not a JSON integer in the u64 range.
	ErrCommandUserInvalid = &Error{Reason: ReasonCommandUserInvalid}
	// ErrCommandUserMismatch: user_id and the record key differ.
	ErrCommandUserMismatch = &Error{Reason: ReasonCommandUserMismatch}
	// ErrCommandAtNs: at_ns is not a JSON integer in the u64 range.
	ErrCommandAtNs = &Error{Reason: ReasonCommandAtNs}
	// ErrCommandRequestID: request_id is not a valid UTF-8 string of at most
	// MaxRequestIDBytes bytes.
	ErrCommandRequestID = &Error{Reason: ReasonCommandRequestID}

	// ErrRejoinBeforeLeave: see ReasonRejoinBeforeLeave; produced by the
	// processor.
	ErrRejoinBeforeLeave = &Error{Reason: ReasonRejoinBeforeLeave}
	// ErrHistoryFull: see ReasonHistoryFull; produced by the processor.
	ErrHistoryFull = &Error{Reason: ReasonHistoryFull}
	// ErrTimestampSkew: see ReasonTimestampSkew; produced by the processor.
	ErrTimestampSkew = &Error{Reason: ReasonTimestampSkew}
	// ErrTimestampOutOfRange: see ReasonTimestampOutOfRange; produced by
	// the processor.
	ErrTimestampOutOfRange = &Error{Reason: ReasonTimestampOutOfRange}
	// ErrCommandAtOutOfRange: see ReasonCommandAtOutOfRange; produced by the
	// processor.
	ErrCommandAtOutOfRange = &Error{Reason: ReasonCommandAtOutOfRange}
	// ErrCommandFutureSkew: see ReasonCommandFutureSkew; produced by the
	// processor.
	ErrCommandFutureSkew = &Error{Reason: ReasonCommandFutureSkew}
	// ErrRecordTooLarge: see ReasonRecordTooLarge; produced by the processor.
	ErrRecordTooLarge = &Error{Reason: ReasonRecordTooLarge}
	// ErrRecordRefused: see ReasonRecordRefused; produced by the processor.
	ErrRecordRefused = &Error{Reason: ReasonRecordRefused}
)

// maxQuoted bounds how many input bytes an error Detail quotes, so a huge
// record cannot make a huge DLQ header.
const maxQuoted = 64

// quote renders b for an error Detail: Go-quoted, cut to maxQuoted bytes.
func quote(b []byte) string {
	if len(b) <= maxQuoted {
		return strconv.Quote(string(b))
	}
	return strconv.Quote(string(b[:maxQuoted])) + "..."
}

// token renders a raw JSON token for an error Detail: verbatim when it is
// short and printable (it is JSON, so a string keeps its own quotes),
// otherwise as quote does.
func token(raw []byte) string {
	if len(raw) <= maxQuoted && utf8.Valid(raw) {
		printable := true
		for _, r := range string(raw) {
			if !strconv.IsPrint(r) {
				printable = false
				break
			}
		}
		if printable {
			return string(raw)
		}
	}
	return quote(raw)
}
