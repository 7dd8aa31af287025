package topics

import (
	"math"
	"strconv"
)

// ParseUserID parses a record key: a user id as decimal ASCII, the form
// [AppendUserID] writes. It accepts exactly the canonical spelling of each
// uint64 — "0", or '1'..'9' followed by digits, up to 18446744073709551615 —
// so that every user has one key and murmur2 sends every record of a user to
// one partition. Anything else (empty, a sign, a space, a non-ASCII digit, a
// leading zero, overflow) is an *[Error] matching [ErrKeyInvalid]; when
// several apply, a non-digit byte wins over a leading zero, which wins over
// overflow. It does not allocate unless it fails.
func ParseUserID(key []byte) (uint64, error) {
	if len(key) == 0 {
		return 0, &Error{Reason: ReasonKeyEmpty, Detail: "key is empty"}
	}
	var n uint64
	overflow := false
	for i, c := range key {
		if c < '0' || c > '9' {
			return 0, &Error{Reason: ReasonKeyNotDecimal,
				Detail: "key " + quote(key) + ": byte " + strconv.Itoa(i) + " is not an ASCII digit"}
		}
		d := uint64(c - '0')
		if n > (math.MaxUint64-d)/10 {
			overflow = true
		}
		n = n*10 + d
	}
	if key[0] == '0' && len(key) > 1 {
		return 0, &Error{Reason: ReasonKeyLeadingZero, Detail: "key " + quote(key) + " has a leading zero"}
	}
	if overflow {
		return 0, &Error{Reason: ReasonKeyOverflow, Detail: "key " + quote(key) + " is above 18446744073709551615"}
	}
	return n, nil
}

// AppendUserID appends the key of user id to dst: its decimal ASCII form,
// which ParseUserID accepts.
func AppendUserID(dst []byte, id uint64) []byte {
	return strconv.AppendUint(dst, id, 10)
}
