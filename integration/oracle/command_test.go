package oracle

import (
	"encoding/json"
	"math"
	"testing"
	"time"
)

func TestDecodeCommand(t *testing.T) {
	const key = 42
	for _, tc := range []struct {
		name   string
		value  string
		want   command
		reason string
	}{
		{"leave with everything", `{"op":"leave","user_id":42,"at_ns":1764633600000000000,"request_id":"r-1"}`,
			command{op: opLeave, userID: 42, atNs: 1764633600000000000, hasAt: true, requestID: "r-1"}, ""},
		{"rejoin, nothing optional", `{"op":"rejoin","user_id":42}`, command{op: opRejoin, userID: 42}, ""},
		{"members in any order, white space", " {\n\"user_id\" : 42 , \"op\":\"leave\"}\t", command{op: opLeave, userID: 42}, ""},
		{"null members are absent", `{"op":"leave","user_id":42,"at_ns":null,"request_id":null}`, command{op: opLeave, userID: 42}, ""},
		{"unknown members are ignored", `{"op":"leave","user_id":42,"extra":{"op":"rejoin"}}`, command{op: opLeave, userID: 42}, ""},
		{"escaped op", `{"op":"le\u0061ve","user_id":42}`, command{op: opLeave, userID: 42}, ""},
		{"at_ns 2^64-1 decodes exactly (C4 refuses it)", `{"op":"leave","user_id":42,"at_ns":18446744073709551615}`,
			command{op: opLeave, userID: 42, atNs: math.MaxUint64, hasAt: true}, ""},
		{"at_ns 2^53+1 is not rounded", `{"op":"leave","user_id":42,"at_ns":9007199254740993}`,
			command{op: opLeave, userID: 42, atNs: 9007199254740993, hasAt: true}, ""},
		{"empty request_id", `{"op":"leave","user_id":42,"request_id":""}`, command{op: opLeave, userID: 42}, ""},

		{"not JSON", `not json`, command{}, reasonCommandJSON},
		{"empty", ``, command{}, reasonCommandJSON},
		{"truncated", `{"op":"leave","user_id":42`, command{}, reasonCommandJSON},
		{"an array", `[{"op":"leave","user_id":42}]`, command{}, reasonCommandJSON},
		{"a string", `"leave"`, command{}, reasonCommandJSON},
		{"null", `null`, command{}, reasonCommandJSON},
		{"trailing data", `{"op":"leave","user_id":42} x`, command{}, reasonCommandJSON},
		{"two objects", `{"op":"leave","user_id":42}{}`, command{}, reasonCommandJSON},
		{"duplicate op", `{"op":"leave","op":"rejoin","user_id":42}`, command{}, reasonCommandJSON},
		{"duplicate by escape", `{"op":"leave","\u006fp":"leave","user_id":42}`, command{}, reasonCommandJSON},
		{"duplicate user_id", `{"op":"leave","user_id":42,"user_id":42}`, command{}, reasonCommandJSON},
		{"leading zero number", `{"op":"leave","user_id":042}`, command{}, reasonCommandJSON},

		{"op missing", `{"user_id":42}`, command{}, reasonCommandOp},
		{"op null", `{"op":null,"user_id":42}`, command{}, reasonCommandOp},
		{"op unknown", `{"op":"quit","user_id":42}`, command{}, reasonCommandOp},
		{"op in capitals", `{"op":"LEAVE","user_id":42}`, command{}, reasonCommandOp},
		{"op a number", `{"op":1,"user_id":42}`, command{}, reasonCommandOp},

		{"user missing", `{"op":"leave"}`, command{}, reasonCommandUserMissing},
		{"user null", `{"op":"leave","user_id":null}`, command{}, reasonCommandUserMissing},
		{"user a string", `{"op":"leave","user_id":"42"}`, command{}, reasonCommandUserInvalid},
		{"user a fraction", `{"op":"leave","user_id":42.0}`, command{}, reasonCommandUserInvalid},
		{"user an exponent", `{"op":"leave","user_id":4.2e1}`, command{}, reasonCommandUserInvalid},
		{"user negative", `{"op":"leave","user_id":-42}`, command{}, reasonCommandUserInvalid},
		{"user minus zero", `{"op":"leave","user_id":-0}`, command{}, reasonCommandUserInvalid},
		{"user above 2^64-1", `{"op":"leave","user_id":18446744073709551616}`, command{}, reasonCommandUserInvalid},
		{"user differs from the key", `{"op":"leave","user_id":43}`, command{}, reasonCommandUserMismatch},

		{"at_ns a string", `{"op":"leave","user_id":42,"at_ns":"1"}`, command{}, reasonCommandAtNs},
		{"at_ns a fraction", `{"op":"leave","user_id":42,"at_ns":1.5e18}`, command{}, reasonCommandAtNs},
		{"at_ns negative", `{"op":"leave","user_id":42,"at_ns":-1}`, command{}, reasonCommandAtNs},
		{"at_ns above 2^64-1", `{"op":"leave","user_id":42,"at_ns":18446744073709551616}`, command{}, reasonCommandAtNs},

		{"request_id a number", `{"op":"leave","user_id":42,"request_id":5}`, command{}, reasonCommandRequestID},
		{"request_id an object", `{"op":"leave","user_id":42,"request_id":{}}`, command{}, reasonCommandRequestID},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, reason := decodeCommand(key, []byte(tc.value))
			if got != tc.want || reason != tc.reason {
				t.Fatalf("decodeCommand(%q) = %+v, %q; want %+v, %q", tc.value, got, reason, tc.want, tc.reason)
			}
		})
	}
}

// TestBoundaryOf is rule C4: the boundary, its range and the future skew.
func TestBoundaryOf(t *testing.T) {
	const skew = 5 * time.Second
	ts := int64(1_800_000_000_000) // ms
	tsNs := uint64(ts) * 1e6
	for _, tc := range []struct {
		name   string
		c      command
		tsMs   int64
		want   uint64
		reason string
	}{
		{"at_ns", command{atNs: 7, hasAt: true}, ts, 7, ""},
		{"record timestamp", command{}, ts, tsNs, ""},
		{"record timestamp 0", command{}, 0, 0, ""},
		{"at_ns exactly skew ahead", command{atNs: tsNs + uint64(skew), hasAt: true}, ts, tsNs + uint64(skew), ""},
		{"at_ns 1ns beyond the skew", command{atNs: tsNs + uint64(skew) + 1, hasAt: true}, ts, 0, reasonFutureSkew},
		{"at_ns an hour ahead", command{atNs: tsNs + uint64(time.Hour), hasAt: true}, ts, 0, reasonFutureSkew},
		{"at_ns 2^63-1", command{atNs: math.MaxInt64, hasAt: true}, math.MaxInt64 / 1_000_000, math.MaxInt64, ""},
		{"at_ns 2^63", command{atNs: math.MaxInt64 + 1, hasAt: true}, ts, 0, reasonAtOutOfRange},
		{"at_ns 2^64-1", command{atNs: math.MaxUint64, hasAt: true}, ts, 0, reasonAtOutOfRange},
		{"negative timestamp, no at_ns", command{}, -1, 0, reasonAtOutOfRange},
		{"timestamp beyond 2^63-1 ns, no at_ns", command{}, math.MaxInt64 / 1_000_000 * 2, 0, reasonAtOutOfRange},
		{"negative timestamp, at_ns within skew of it", command{atNs: 0, hasAt: true}, -1, 0, ""},
		{"negative timestamp, at_ns far ahead", command{atNs: uint64(10 * time.Second), hasAt: true}, -1, 0, reasonFutureSkew},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, reason := boundaryOf(tc.c, tc.tsMs, skew)
			if got != tc.want || reason != tc.reason {
				t.Fatalf("boundaryOf(%+v, %d) = %d, %q; want %d, %q", tc.c, tc.tsMs, got, reason, tc.want, tc.reason)
			}
		})
	}
}

// FuzzDecodeCommand: the decoder never panics; it accepts only valid JSON;
// and what it accepts means the same once written again by encoding/json.
func FuzzDecodeCommand(f *testing.F) {
	for _, s := range []string{
		`{"op":"leave","user_id":42,"at_ns":1764633600000000000,"request_id":"r-1"}`,
		`{"op":"rejoin","user_id":42}`,
		`{"op":"leave","op":"rejoin","user_id":42}`,
		`{"op":"leave","user_id":42,"at_ns":18446744073709551615}`,
		`{"op":"leave","user_id":4.2e1}`,
		`{"op":"leave","user_id":42} x`,
		`{"op":"le\u0061ve","user_id":42,"x":[1,{"y":null}]}`,
		``, `null`, `[]`, `{`,
	} {
		f.Add(uint64(42), []byte(s))
	}
	f.Fuzz(func(t *testing.T, key uint64, value []byte) {
		c, reason := decodeCommand(key, value)
		if reason != "" {
			if c != (command{}) {
				t.Fatalf("refused with %q but returned %+v", reason, c)
			}
			if !json.Valid(value) && reason != reasonCommandJSON {
				t.Fatalf("invalid JSON %q refused as %q, want %q", value, reason, reasonCommandJSON)
			}
			return
		}
		if !json.Valid(value) {
			t.Fatalf("accepted invalid JSON %q", value)
		}
		if c.userID != key || (c.op != opLeave && c.op != opRejoin) {
			t.Fatalf("accepted %q as %+v for key %d", value, c, key)
		}
		again := map[string]any{"op": c.op.String(), "user_id": c.userID}
		if c.hasAt {
			again["at_ns"] = c.atNs
		}
		if c.requestID != "" {
			again["request_id"] = c.requestID
		}
		b, err := json.Marshal(again)
		if err != nil {
			t.Fatal(err)
		}
		if c2, reason := decodeCommand(key, b); c2 != c || reason != "" {
			t.Fatalf("%q decoded to %+v; written again as %s it decodes to %+v, %q", value, c, b, c2, reason)
		}
	})
}
