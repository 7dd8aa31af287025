package topics

import (
	"math"
	"unicode/utf16"
	"unicode/utf8"
)

// This file holds the small JSON reader and writer behind the command codec.
// The reader runs only on input json.Valid has accepted, so it walks the
// top-level object without re-checking the grammar; it exists because
// encoding/json folds member names' case, takes the last of duplicate
// members, and reads numbers through float64 unless asked not to.

// object walks the members of a top-level JSON object. data must be
// json.Valid and start, after white space, with '{'.
type object struct {
	data []byte
	i    int
}

func newObject(data []byte) object {
	o := object{data: data}
	o.space()
	o.i++ // '{'
	return o
}

// next returns the raw name (between the quotes, escapes intact) and the raw
// value of the next member; ok is false after the last one.
func (o *object) next() (name, value []byte, ok bool) {
	o.space()
	if o.data[o.i] == ',' {
		o.i++
		o.space()
	}
	if o.data[o.i] == '}' {
		return nil, nil, false
	}
	name = o.str()
	name = name[1 : len(name)-1]
	o.space()
	o.i++ // ':'
	o.space()
	return name, o.value(), true
}

func (o *object) space() {
	for o.i < len(o.data) {
		switch o.data[o.i] {
		case ' ', '\t', '\n', '\r':
			o.i++
		default:
			return
		}
	}
}

// str returns the string token at o.i, quotes included.
func (o *object) str() []byte {
	start := o.i
	o.i++ // opening quote
	for {
		switch o.data[o.i] {
		case '\\':
			o.i += 2
		case '"':
			o.i++
			return o.data[start:o.i]
		default:
			o.i++
		}
	}
}

// value returns the value token at o.i: a string, number or literal, or a
// whole array or object.
func (o *object) value() []byte {
	start := o.i
	switch o.data[o.i] {
	case '"':
		return o.str()
	case '{', '[':
		depth := 0
		for {
			switch o.data[o.i] {
			case '"':
				o.str()
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
			}
			o.i++
			if depth == 0 {
				return o.data[start:o.i]
			}
		}
	default: // number, true, false, null
		for o.i < len(o.data) {
			switch o.data[o.i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return o.data[start:o.i]
			}
			o.i++
		}
		return o.data[start:o.i]
	}
}

// kind names the JSON type of a raw value, for error details.
func kind(raw []byte) string {
	switch raw[0] {
	case '"':
		return "a string"
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	}
	return "a number"
}

// parseUint says why a raw JSON value is not an integer in 0..2^64-1, or
// returns "" and the integer. JSON forbids leading zeros and '+' already.
func parseUint(raw []byte) (uint64, string) {
	if raw[0] == '-' {
		return 0, "is negative"
	}
	if raw[0] < '0' || raw[0] > '9' {
		return 0, "is " + kind(raw) + ", not an integer"
	}
	var n uint64
	for _, c := range raw {
		if c < '0' || c > '9' {
			return 0, "is not an integer (fraction or exponent)"
		}
		d := uint64(c - '0')
		if n > (math.MaxUint64-d)/10 {
			return 0, "is above 18446744073709551615"
		}
		n = n*10 + d
	}
	return n, ""
}

// unquote appends to dst the text of the raw JSON string s (between the
// quotes, as json.Valid accepted it) with escapes resolved. ok is false if s
// escapes a lone UTF-16 surrogate, which no UTF-8 text can hold;
// encoding/json would quietly turn it into U+FFFD.
func unquote(dst, s []byte) (_ []byte, ok bool) {
	for i := 0; i < len(s); {
		c := s[i]
		if c != '\\' {
			dst = append(dst, c)
			i++
			continue
		}
		switch s[i+1] {
		case '"', '\\', '/':
			dst = append(dst, s[i+1])
		case 'b':
			dst = append(dst, '\b')
		case 'f':
			dst = append(dst, '\f')
		case 'n':
			dst = append(dst, '\n')
		case 'r':
			dst = append(dst, '\r')
		case 't':
			dst = append(dst, '\t')
		case 'u':
			r := hex4(s[i+2 : i+6])
			i += 6
			if utf16.IsSurrogate(r) {
				if r >= 0xdc00 || i+6 > len(s) || s[i] != '\\' || s[i+1] != 'u' {
					return dst, false
				}
				r = utf16.DecodeRune(r, hex4(s[i+2:i+6]))
				if r == utf8.RuneError {
					return dst, false
				}
				i += 6
			}
			dst = utf8.AppendRune(dst, r)
			continue
		}
		i += 2
	}
	return dst, true
}

func hex4(b []byte) rune {
	var r rune
	for _, c := range b[:4] {
		switch {
		case c >= '0' && c <= '9':
			c -= '0'
		case c >= 'a' && c <= 'f':
			c -= 'a' - 10
		default: // 'A'..'F', as json.Valid guarantees
			c -= 'A' - 10
		}
		r = r<<4 | rune(c)
	}
	return r
}

// appendQuoted appends s as a JSON string. It escapes only what JSON
// requires — '"', '\\' and bytes below 0x20 — and copies everything else,
// invalid UTF-8 included, as is.
func appendQuoted(dst []byte, s string) []byte {
	const hex = "0123456789abcdef"
	dst = append(dst, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			dst = append(dst, '\\', c)
		case c >= 0x20:
			dst = append(dst, c)
		case c == '\n':
			dst = append(dst, '\\', 'n')
		case c == '\r':
			dst = append(dst, '\\', 'r')
		case c == '\t':
			dst = append(dst, '\\', 't')
		case c == '\b':
			dst = append(dst, '\\', 'b')
		case c == '\f':
			dst = append(dst, '\\', 'f')
		default:
			dst = append(dst, '\\', 'u', '0', '0', hex[c>>4], hex[c&0xf])
		}
	}
	return append(dst, '"')
}
