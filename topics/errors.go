package topics

import (
	"errors"
	"strconv"
	"unicode/utf8"
)

// Reason says in one short, stable, snake_case word why a record was
// rejected. It is the value of the [HeaderReason] header on the DLQ and a
// good metric label: once published, a Reason is never renamed.
type Reason string

// Reasons for a bad record key. Every key reason matches [ErrKeyInvalid].
const (
	// ReasonKeyInvalid is the class of every key_* reason below. No record
	// is rejected with this reason itself; it exists so that
	// errors.Is(err, ErrKeyInvalid) holds for any key problem.
	ReasonKeyInvalid Reason = "key_invalid"
	// ReasonKeyEmpty: the key is empty or null.
	ReasonKeyEmpty Reason = "key_empty"
	// ReasonKeyNotDecimal: the key has a byte that is not an ASCII digit
	// (a sign, a space, a full-width digit, ...).
	ReasonKeyNotDecimal Reason = "key_not_decimal"
	// ReasonKeyLeadingZero: the key has a leading zero, as in "007". Only
	// "0" itself may start with 0, so that each user has exactly one key.
	ReasonKeyLeadingZero Reason = "key_leading_zero"
	// ReasonKeyOverflow: the key is all digits but above 18446744073709551615.
	ReasonKeyOverflow Reason = "key_overflow"
)

// Reasons for a bad command value, produced by [DecodeCommand].
const (
	// ReasonCommandJSON: the value is not one JSON object (bad syntax,
	// trailing data, another JSON type), or it names a member twice.
	ReasonCommandJSON Reason = "command_json"
	// ReasonCommandOp: op is missing, null, not a string, or not exactly
	// "leave" or "rejoin".
	ReasonCommandOp Reason = "command_op"
	// ReasonCommandUserMissing: user_id is missing or null.
	ReasonCommandUserMissing Reason = "command_user_missing"
	// ReasonCommandUserInvalid: user_id is not a JSON integer in
	// 0..18446744073709551615 (a string, a fraction, an exponent, a sign).
	ReasonCommandUserInvalid Reason = "command_user_invalid"
	// ReasonCommandUserMismatch: user_id is valid but differs from the key.
	ReasonCommandUserMismatch Reason = "command_user_mismatch"
	// ReasonCommandAtNs: at_ns is present but not a JSON integer in
	// 0..18446744073709551615.
	ReasonCommandAtNs Reason = "command_at_ns"
	// ReasonCommandRequestID: request_id is not a string, is not valid
	// UTF-8, or is longer than [MaxRequestIDBytes].
	ReasonCommandRequestID Reason = "command_request_id"
)

// Reasons decided outside this package. They are defined here so that every
// reason that can reach the DLQ lives in one place; the processor produces
// them, not this package.
const (
	// ReasonRejoinBeforeLeave: a well-formed rejoin whose boundary is
	// earlier than the open leave's left_at_ns; applying it would make an
	// episode end before it began.
	ReasonRejoinBeforeLeave Reason = "rejoin_before_leave"
	// ReasonHistoryFull: a rejoin of a user who already has the most
	// closed episodes a user keeps (10,000); the user stays left.
	ReasonHistoryFull Reason = "history_full"
	// ReasonTimestampSkew: a signal whose event time (its record
	// timestamp) lies further ahead of the processor's clock than the
	// allowed skew; holding it for alignment would stall its partition.
	ReasonTimestampSkew Reason = "timestamp_future_skew"
	// ReasonTimestampOutOfRange: a signal whose event time (its record
	// timestamp) is before the Unix epoch, which no boundary can be.
	ReasonTimestampOutOfRange Reason = "timestamp_out_of_range"
	// ReasonCommandAtOutOfRange: a command whose boundary is not a time
	// the processor can hold: at_ns above 2^63-1 (18446744073709551615,
	// say), or no at_ns and a negative record timestamp.
	ReasonCommandAtOutOfRange Reason = "command_at_out_of_range"
	// ReasonCommandFutureSkew: a command whose boundary lies further ahead
	// of its own record timestamp than the allowed skew; applied, it would
	// make the user left while its signals are still forwarded.
	ReasonCommandFutureSkew Reason = "command_future_skew"
	// ReasonRecordTooLarge: a record, or its DLQ copy, too large for the
	// topic it had to go to. The DLQ holds a truncated copy; see
	// HeaderOriginalReason and the other HeaderOriginal headers.
	ReasonRecordTooLarge Reason = "record_too_large"
	// ReasonRecordRefused: the broker refused what the record became (the
	// forwarded copy, a re-published copy, a DLQ copy) for a reason of its
	// own other than size: an invalid record, a timestamp the target
	// topic does not take. The DLQ holds a copy stamped with the time it
	// was written; HeaderError says what the broker said.
	ReasonRecordRefused Reason = "record_refused"
)

// Reasons returns every Reason defined by this package, in a stable order,
// for example to initialise a metric for each label value. ReasonKeyInvalid
// is left out because no record is rejected with it.
func Reasons() []Reason {
	return []Reason{
		ReasonKeyEmpty, ReasonKeyNotDecimal, ReasonKeyLeadingZero, ReasonKeyOverflow,
		ReasonCommandJSON, ReasonCommandOp, ReasonCommandUserMissing,
		ReasonCommandUserInvalid, ReasonCommandUserMismatch,
		ReasonCommandAtNs, ReasonCommandRequestID,
		ReasonRejoinBeforeLeave, ReasonHistoryFull, ReasonTimestampSkew,
		ReasonTimestampOutOfRange, ReasonCommandAtOutOfRange, ReasonCommandFutureSkew, ReasonRecordTooLarge,
		ReasonRecordRefused,
	}
}

// isKey reports whether r is a reason about the record key.
func (r Reason) isKey() bool {
	switch r {
	case ReasonKeyInvalid, ReasonKeyEmpty, ReasonKeyNotDecimal, ReasonKeyLeadingZero, ReasonKeyOverflow:
		return true
	}
	return false
}

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
