package topics

import (
	"errors"
	"fmt"
	"io"
	"regexp"
	"testing"
)

func TestErrorIs(t *testing.T) {
	keyReasons := []Reason{ReasonKeyEmpty, ReasonKeyNotDecimal, ReasonKeyLeadingZero, ReasonKeyOverflow}
	tests := []struct {
		name   string
		err    error
		target error
		want   bool
	}{
		{name: "same reason", err: &Error{Reason: ReasonCommandOp, Detail: "x"}, target: ErrCommandOp, want: true},
		{name: "detail not compared", err: &Error{Reason: ReasonCommandOp, Detail: "x"}, target: &Error{Reason: ReasonCommandOp, Detail: "y"}, want: true},
		{name: "other reason", err: &Error{Reason: ReasonCommandOp}, target: ErrCommandJSON, want: false},
		{name: "wrapped", err: fmt.Errorf("reading offset 7: %w", &Error{Reason: ReasonCommandAtNs}), target: ErrCommandAtNs, want: true},
		{name: "not an Error", err: io.EOF, target: ErrKeyInvalid, want: false},
		{name: "Error is not io.EOF", err: ErrKeyEmpty, target: io.EOF, want: false},
		{name: "key class does not match specific key reason", err: ErrKeyInvalid, target: ErrKeyEmpty, want: false},
		{name: "command is not a key problem", err: &Error{Reason: ReasonCommandUserInvalid}, target: ErrKeyInvalid, want: false},
		{name: "mismatch is not a key problem", err: &Error{Reason: ReasonCommandUserMismatch}, target: ErrKeyInvalid, want: false},
		{name: "processor reason", err: &Error{Reason: ReasonRejoinBeforeLeave, Detail: "x"}, target: ErrRejoinBeforeLeave, want: true},
		{name: "skew reason", err: &Error{Reason: ReasonTimestampSkew}, target: ErrTimestampSkew, want: true},
	}
	for _, r := range keyReasons {
		tests = append(tests, struct {
			name   string
			err    error
			target error
			want   bool
		}{name: string(r) + " is a key problem", err: &Error{Reason: r, Detail: "d"}, target: ErrKeyInvalid, want: true})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := errors.Is(tt.err, tt.target); got != tt.want {
				t.Fatalf("errors.Is(%v, %v) = %v, want %v", tt.err, tt.target, got, tt.want)
			}
		})
	}
}

func TestErrorText(t *testing.T) {
	tests := []struct {
		name string
		err  *Error
		want string
	}{
		{name: "sentinel", err: ErrCommandOp, want: "topics: command_op"},
		{name: "with detail", err: &Error{Reason: ReasonKeyLeadingZero, Detail: `key "007" has a leading zero`}, want: `topics: key_leading_zero: key "007" has a leading zero`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := tt.err.Error(); got != tt.want {
				t.Fatalf("Error() = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestReasonOf(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want Reason
	}{
		{name: "nil", err: nil, want: ""},
		{name: "other error", err: io.EOF, want: ""},
		{name: "Error", err: &Error{Reason: ReasonCommandOp}, want: ReasonCommandOp},
		{name: "wrapped", err: fmt.Errorf("offset 3: %w", &Error{Reason: ReasonKeyOverflow}), want: ReasonKeyOverflow},
		{name: "joined", err: errors.Join(io.EOF, &Error{Reason: ReasonCommandJSON}), want: ReasonCommandJSON},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ReasonOf(tt.err); got != tt.want {
				t.Fatalf("ReasonOf(%v) = %q, want %q", tt.err, got, tt.want)
			}
		})
	}
}

// TestReasons pins the published reasons: they are DLQ header values and
// metric labels, so changing one breaks consumers.
func TestReasons(t *testing.T) {
	want := []Reason{
		"key_empty", "key_not_decimal", "key_leading_zero", "key_overflow",
		"command_json", "command_op", "command_user_missing",
		"command_user_invalid", "command_user_mismatch",
		"command_at_ns", "command_request_id",
		"rejoin_before_leave", "history_full", "timestamp_future_skew",
		"timestamp_out_of_range", "command_at_out_of_range", "command_future_skew", "record_too_large",
		"record_refused",
	}
	got := Reasons()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("Reasons() = %v\nwant        %v", got, want)
	}
	snake := regexp.MustCompile(`^[a-z]+(_[a-z]+)*$`)
	for _, r := range append(got, ReasonKeyInvalid) {
		if !snake.MatchString(string(r)) {
			t.Errorf("reason %q is not snake_case", r)
		}
	}
}

func TestHeaders(t *testing.T) {
	got := []string{HeaderReason, HeaderError, HeaderSourceTopic, HeaderSourcePartition, HeaderSourceOffset}
	want := []string{"cohortgate.reason", "cohortgate.error", "cohortgate.source.topic", "cohortgate.source.partition", "cohortgate.source.offset"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("headers = %v, want %v", got, want)
	}
}

func TestDetailBounded(t *testing.T) {
	key := make([]byte, 10000)
	for i := range key {
		key[i] = 'x'
	}
	_, err := ParseUserID(key)
	if n := len(err.Error()); n > 200 {
		t.Fatalf("error for a 10000-byte key is %d bytes: %s", n, err)
	}
	value := append([]byte(`{"op":"leave","user_id":1,"request_id":"`), key...)
	value = append(value, `"}`...)
	_, err = DecodeCommand([]byte("1"), value)
	if !errors.Is(err, ErrCommandRequestID) || len(err.Error()) > 200 {
		t.Fatalf("error for a 10000-byte request_id: %v", err)
	}
}
