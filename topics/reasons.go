package topics

// The catalogue of every reason a record reaches the DLQ for: the
// decoders here decide the key_* and command_* reasons, the processor the
// rest. A DLQ record carries its reason in HeaderReason (dlq.go).

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
