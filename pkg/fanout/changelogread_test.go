package fanout

import (
	"bytes"
	"testing"
)

func TestHasNoWindows(t *testing.T) {
	for _, tc := range []struct {
		value string
		want  bool
	}{
		{``, false},
		{`[]`, false},
		{`"late_leaves":[]`, true},
		{`{"user_id":1,"status":"active","left_at_ns":null,"history":[],"late_leaves":[],"command":{"op":"rejoin"}}`, true},
		{`{"user_id":1,"history":[{"left_at_ns":1,"rejoined_at_ns":2}],"late_leaves":[]}`, true},
		{`{"user_id":1,"late_leaves":[{"left_at_ns":1,"forwarded_through_ns":2,"exact":true}]}`, false},
		{`{"user_id":1,"late_leaves": []}`, false}, // not as the processor writes it: decoded
		{`"late_leaves":[`, false},
		{`late_leaves":[]`, false},
		{`[[["late_leaves":[]`, true},
		{`"late_leaves":["late_leaves":[]`, true},
		{`x"late_leaves":[]`, true},
	} {
		if got := hasNoWindows([]byte(tc.value)); got != tc.want {
			t.Errorf("hasNoWindows(%q) = %v, want %v", tc.value, got, tc.want)
		}
	}
}

// FuzzHasNoWindows checks hasNoWindows against bytes.Contains, which it
// replaces.
func FuzzHasNoWindows(f *testing.F) {
	for _, s := range []string{``, `"late_leaves":[]`, `{"history":[],"late_leaves":[{"exact":true}]}`, `"late_leaves":[[]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, value []byte) {
		if got, want := hasNoWindows(value), bytes.Contains(value, noWindows); got != want {
			t.Fatalf("hasNoWindows(%q) = %v, bytes.Contains says %v", value, got, want)
		}
	})
}

// BenchmarkHasNoWindows times the check on a record as the processor
// writes it after a leave and a rejoin, beside bytes.Contains.
func BenchmarkHasNoWindows(b *testing.B) {
	value := []byte(`{"user_id":123456,"status":"active","left_at_ns":null,"history":[{"left_at_ns":1796621641002000000,` +
		`"rejoined_at_ns":1796621641003000000}],"late_leaves":[],"command":{"op":"rejoin","at_ns":1796621641003000000,` +
		`"topic":"handover-ba54p8.commands","partitions":1,"partition":0,"offset":999999,"changed":true},` +
		`"receipt":{"applied_at_ns":1796621700000000000,"signals_partition":0,"signals_offset":-1}}`)
	b.Run("hasNoWindows", func(b *testing.B) {
		for range b.N {
			if !hasNoWindows(value) {
				b.Fatal("windows")
			}
		}
	})
	b.Run("bytes.Contains", func(b *testing.B) {
		for range b.N {
			if !bytes.Contains(value, noWindows) {
				b.Fatal("windows")
			}
		}
	})
}
