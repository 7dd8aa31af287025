package oracle

import "math"

// parseUserID reads a record key as a user id (docs/client.md, "Record formats"):
// "0", or a digit 1-9 followed by digits, at most 18446744073709551615 —
// no sign, space or leading zero, and not empty or null. ok is false for
// anything else: rule C1 or S1 sends such a record to the DLQ.
func parseUserID(key []byte) (id uint64, ok bool) {
	if len(key) == 0 || (key[0] == '0' && len(key) > 1) {
		return 0, false
	}
	for _, c := range key {
		if c < '0' || c > '9' {
			return 0, false
		}
		d := uint64(c - '0')
		if id > (math.MaxUint64-d)/10 {
			return 0, false
		}
		id = id*10 + d
	}
	return id, true
}
