package topics

import (
	"errors"
	"math"
	"testing"
)

func TestParseUserID(t *testing.T) {
	tests := []struct {
		name string
		key  string
		want uint64
		err  *Error // sentinel; nil when the key is valid
	}{
		{name: "zero", key: "0", want: 0},
		{name: "one", key: "1", want: 1},
		{name: "typical", key: "42", want: 42},
		{name: "2^53+1 exactly", key: "9007199254740993", want: 1<<53 + 1},
		{name: "max uint64", key: "18446744073709551615", want: math.MaxUint64},
		{name: "max uint64 - 1", key: "18446744073709551614", want: math.MaxUint64 - 1},

		{name: "empty", key: "", err: ErrKeyEmpty},
		{name: "max+1", key: "18446744073709551616", err: ErrKeyOverflow},
		{name: "max*10", key: "184467440737095516150", err: ErrKeyOverflow},
		{name: "twenty nines", key: "99999999999999999999", err: ErrKeyOverflow},
		{name: "very long", key: "1000000000000000000000000000000000000000", err: ErrKeyOverflow},
		{name: "leading zero", key: "007", err: ErrKeyLeadingZero},
		{name: "double zero", key: "00", err: ErrKeyLeadingZero},
		{name: "zero one", key: "01", err: ErrKeyLeadingZero},
		{name: "leading zero beats overflow", key: "0184467440737095516160", err: ErrKeyLeadingZero},
		{name: "plus sign", key: "+1", err: ErrKeyNotDecimal},
		{name: "minus sign", key: "-1", err: ErrKeyNotDecimal},
		{name: "minus zero", key: "-0", err: ErrKeyNotDecimal},
		{name: "leading space", key: " 1", err: ErrKeyNotDecimal},
		{name: "trailing space", key: "1 ", err: ErrKeyNotDecimal},
		{name: "trailing newline", key: "1\n", err: ErrKeyNotDecimal},
		{name: "NUL", key: "1\x00", err: ErrKeyNotDecimal},
		{name: "full-width digit", key: "１", err: ErrKeyNotDecimal},
		{name: "arabic-indic digit", key: "٤٢", err: ErrKeyNotDecimal},
		{name: "hex", key: "0x2a", err: ErrKeyNotDecimal},
		{name: "underscore", key: "1_000", err: ErrKeyNotDecimal},
		{name: "fraction", key: "1.0", err: ErrKeyNotDecimal},
		{name: "exponent", key: "1e3", err: ErrKeyNotDecimal},
		{name: "letters", key: "abc", err: ErrKeyNotDecimal},
		{name: "not decimal beats leading zero", key: "0x", err: ErrKeyNotDecimal},
		{name: "not decimal beats overflow", key: "99999999999999999999x", err: ErrKeyNotDecimal},
		{name: "JSON string", key: `"42"`, err: ErrKeyNotDecimal},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseUserID([]byte(tt.key))
			if tt.err == nil {
				if err != nil || got != tt.want {
					t.Fatalf("ParseUserID(%q) = %d, %v; want %d, nil", tt.key, got, err, tt.want)
				}
				if back := string(AppendUserID(nil, got)); back != tt.key {
					t.Errorf("AppendUserID(%d) = %q, want %q", got, back, tt.key)
				}
				return
			}
			if !errors.Is(err, tt.err) {
				t.Fatalf("ParseUserID(%q) error = %v, want %v", tt.key, err, tt.err)
			}
			if !errors.Is(err, ErrKeyInvalid) {
				t.Errorf("ParseUserID(%q) error %v does not match ErrKeyInvalid", tt.key, err)
			}
			if got != 0 {
				t.Errorf("ParseUserID(%q) = %d with an error, want 0", tt.key, got)
			}
		})
	}
}

func TestParseUserIDNil(t *testing.T) {
	if _, err := ParseUserID(nil); !errors.Is(err, ErrKeyEmpty) {
		t.Fatalf("ParseUserID(nil) error = %v, want ErrKeyEmpty", err)
	}
}

func TestParseUserIDAllocs(t *testing.T) {
	key := []byte("18446744073709551615")
	allocs := testing.AllocsPerRun(1000, func() {
		if _, err := ParseUserID(key); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("ParseUserID allocates %v times per call, want 0", allocs)
	}
}

func TestAppendUserID(t *testing.T) {
	tests := []struct {
		name string
		dst  string
		id   uint64
		want string
	}{
		{name: "zero", id: 0, want: "0"},
		{name: "max", id: math.MaxUint64, want: "18446744073709551615"},
		{name: "appends", dst: "user-", id: 42, want: "user-42"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := string(AppendUserID([]byte(tt.dst), tt.id)); got != tt.want {
				t.Fatalf("AppendUserID(%q, %d) = %q, want %q", tt.dst, tt.id, got, tt.want)
			}
		})
	}
}

var sinkID uint64

func BenchmarkParseUserID(b *testing.B) {
	for _, key := range []string{"42", "9007199254740993", "18446744073709551615"} {
		b.Run(key, func(b *testing.B) {
			k := []byte(key)
			b.ReportAllocs()
			for b.Loop() {
				id, err := ParseUserID(k)
				if err != nil {
					b.Fatal(err)
				}
				sinkID = id
			}
		})
	}
}
