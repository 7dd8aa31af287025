package oracle

import (
	"math"
	"testing"
)

func TestParseUserID(t *testing.T) {
	for _, tc := range []struct {
		key  string
		null bool
		want uint64
		ok   bool
	}{
		{key: "0", want: 0, ok: true},
		{key: "7", want: 7, ok: true},
		{key: "1234567890", want: 1234567890, ok: true},
		{key: "18446744073709551615", want: math.MaxUint64, ok: true},
		{key: "18446744073709551616"},
		{key: "99999999999999999999"},
		{key: "007"},
		{key: "00"},
		{key: ""},
		{null: true},
		{key: "-1"},
		{key: "+1"},
		{key: " 1"},
		{key: "1 "},
		{key: "12a"},
		{key: "１"}, // a full-width digit
	} {
		key := []byte(tc.key)
		if tc.null {
			key = nil
		}
		got, ok := parseUserID(key)
		if ok != tc.ok || got != tc.want {
			t.Errorf("parseUserID(%q) = %d, %v; want %d, %v", tc.key, got, ok, tc.want, tc.ok)
		}
	}
}
