package topics

import (
	"errors"
	"math"
	"strings"
	"testing"
)

func TestDecodeCommand(t *testing.T) {
	const at = 1764633600000000000
	tests := []struct {
		name  string
		key   string
		value string
		want  Command
		err   *Error // sentinel; nil when the command is valid
	}{
		// Accepted.
		{name: "leave", key: "42", value: `{"op":"leave","user_id":42}`,
			want: Command{Op: Leave, UserID: 42}},
		{name: "rejoin", key: "42", value: `{"op":"rejoin","user_id":42}`,
			want: Command{Op: Rejoin, UserID: 42}},
		{name: "all members", key: "42", value: `{"op":"leave","user_id":42,"at_ns":1764633600000000000,"request_id":"r-1"}`,
			want: Command{Op: Leave, UserID: 42, AtNs: at, HasAt: true, RequestID: "r-1"}},
		{name: "members in any order", key: "42", value: `{"request_id":"r-1","at_ns":1764633600000000000,"user_id":42,"op":"rejoin"}`,
			want: Command{Op: Rejoin, UserID: 42, AtNs: at, HasAt: true, RequestID: "r-1"}},
		{name: "white space everywhere", key: "42", value: " \t\r\n{ \"op\" :\n\"leave\" , \"user_id\"\t: 42 } \n",
			want: Command{Op: Leave, UserID: 42}},
		{name: "user 0", key: "0", value: `{"op":"leave","user_id":0}`,
			want: Command{Op: Leave, UserID: 0}},
		{name: "user 2^53+1 kept exactly", key: "9007199254740993", value: `{"op":"leave","user_id":9007199254740993}`,
			want: Command{Op: Leave, UserID: 1<<53 + 1}},
		{name: "user max uint64", key: "18446744073709551615", value: `{"op":"leave","user_id":18446744073709551615}`,
			want: Command{Op: Leave, UserID: math.MaxUint64}},
		{name: "at_ns 0", key: "1", value: `{"op":"leave","user_id":1,"at_ns":0}`,
			want: Command{Op: Leave, UserID: 1, AtNs: 0, HasAt: true}},
		{name: "at_ns 2^53+1 kept exactly", key: "1", value: `{"op":"leave","user_id":1,"at_ns":9007199254740993}`,
			want: Command{Op: Leave, UserID: 1, AtNs: 1<<53 + 1, HasAt: true}},
		{name: "at_ns max uint64", key: "1", value: `{"op":"leave","user_id":1,"at_ns":18446744073709551615}`,
			want: Command{Op: Leave, UserID: 1, AtNs: math.MaxUint64, HasAt: true}},
		{name: "at_ns null is absent", key: "1", value: `{"op":"leave","user_id":1,"at_ns":null}`,
			want: Command{Op: Leave, UserID: 1}},
		{name: "request_id null is absent", key: "1", value: `{"op":"leave","user_id":1,"request_id":null}`,
			want: Command{Op: Leave, UserID: 1}},
		{name: "request_id empty is absent", key: "1", value: `{"op":"leave","user_id":1,"request_id":""}`,
			want: Command{Op: Leave, UserID: 1}},
		{name: "request_id escapes", key: "1", value: `{"op":"leave","user_id":1,"request_id":"a\"b\\c\/d\n\u00e9\ud83d\ude00\u0000"}`,
			want: Command{Op: Leave, UserID: 1, RequestID: "a\"b\\c/d\né😀\x00"}},
		{name: "request_id UTF-8", key: "1", value: `{"op":"leave","user_id":1,"request_id":"größe-日本"}`,
			want: Command{Op: Leave, UserID: 1, RequestID: "größe-日本"}},
		{name: "request_id at the limit", key: "1", value: `{"op":"leave","user_id":1,"request_id":"` + strings.Repeat("x", MaxRequestIDBytes) + `"}`,
			want: Command{Op: Leave, UserID: 1, RequestID: strings.Repeat("x", MaxRequestIDBytes)}},
		{name: "request_id at the limit after unescaping", key: "1", value: `{"op":"leave","user_id":1,"request_id":"` + strings.Repeat(`\u00e9`, MaxRequestIDBytes/2) + `"}`,
			want: Command{Op: Leave, UserID: 1, RequestID: strings.Repeat("é", MaxRequestIDBytes/2)}},
		{name: "unknown members ignored", key: "7", value: `{"op":"leave","v":2,"meta":{"op":"rejoin","x":[1,{"}":"]"}],"s":"\"{"},"user_id":7,"tags":["a","b"],"ok":true,"n":null,"f":-1.5e3}`,
			want: Command{Op: Leave, UserID: 7}},
		{name: "member names are case-sensitive", key: "7", value: `{"op":"leave","OP":"rejoin","User_ID":8,"user_id":7,"AT_NS":"x"}`,
			want: Command{Op: Leave, UserID: 7}},
		{name: "escaped member names", key: "7", value: `{"\u006fp":"leave","user\u005fid":7,"\u0061t_ns":5}`,
			want: Command{Op: Leave, UserID: 7, AtNs: 5, HasAt: true}},
		{name: "escaped op", key: "7", value: `{"op":"rej\u006fin","user_id":7}`,
			want: Command{Op: Rejoin, UserID: 7}},
		{name: "unknown duplicate members allowed", key: "7", value: `{"x":1,"x":2,"op":"leave","user_id":7}`,
			want: Command{Op: Leave, UserID: 7}},

		// The key.
		{name: "key empty", key: "", value: `{"op":"leave","user_id":0}`, err: ErrKeyEmpty},
		{name: "key leading zero", key: "042", value: `{"op":"leave","user_id":42}`, err: ErrKeyLeadingZero},
		{name: "key not decimal", key: "-42", value: `{"op":"leave","user_id":42}`, err: ErrKeyNotDecimal},
		{name: "key overflow", key: "18446744073709551616", value: `{"op":"leave","user_id":18446744073709551615}`, err: ErrKeyOverflow},
		{name: "key checked before the value", key: "x", value: `not json`, err: ErrKeyNotDecimal},

		// One JSON object.
		{name: "empty value", key: "1", value: ``, err: ErrCommandJSON},
		{name: "white space only", key: "1", value: "  \n", err: ErrCommandJSON},
		{name: "truncated", key: "1", value: `{"op":"leave","user_id":1`, err: ErrCommandJSON},
		{name: "trailing comma", key: "1", value: `{"op":"leave","user_id":1,}`, err: ErrCommandJSON},
		{name: "trailing garbage", key: "1", value: `{"op":"leave","user_id":1}x`, err: ErrCommandJSON},
		{name: "second object", key: "1", value: `{"op":"leave","user_id":1}{}`, err: ErrCommandJSON},
		{name: "second object after space", key: "1", value: `{"op":"leave","user_id":1} {"op":"rejoin"}`, err: ErrCommandJSON},
		{name: "single quotes", key: "1", value: `{'op':'leave','user_id':1}`, err: ErrCommandJSON},
		{name: "NaN", key: "1", value: `{"op":"leave","user_id":NaN}`, err: ErrCommandJSON},
		{name: "leading zero number", key: "1", value: `{"op":"leave","user_id":01}`, err: ErrCommandJSON},
		{name: "plus sign number", key: "1", value: `{"op":"leave","user_id":+1}`, err: ErrCommandJSON},
		{name: "raw control byte in string", key: "1", value: "{\"op\":\"leave\",\"user_id\":1,\"request_id\":\"a\nb\"}", err: ErrCommandJSON},
		{name: "array", key: "1", value: `[{"op":"leave","user_id":1}]`, err: ErrCommandJSON},
		{name: "string", key: "1", value: `"leave"`, err: ErrCommandJSON},
		{name: "number", key: "1", value: `1`, err: ErrCommandJSON},
		{name: "null", key: "1", value: `null`, err: ErrCommandJSON},
		{name: "duplicate op", key: "1", value: `{"op":"leave","op":"rejoin","user_id":1}`, err: ErrCommandJSON},
		{name: "duplicate op, one escaped", key: "1", value: `{"op":"leave","\u006fp":"rejoin","user_id":1}`, err: ErrCommandJSON},
		{name: "duplicate user_id", key: "1", value: `{"op":"leave","user_id":1,"user_id":1}`, err: ErrCommandJSON},
		{name: "duplicate at_ns, one null", key: "1", value: `{"op":"leave","user_id":1,"at_ns":null,"at_ns":5}`, err: ErrCommandJSON},
		{name: "duplicate request_id", key: "1", value: `{"op":"leave","user_id":1,"request_id":"a","request_id":"a"}`, err: ErrCommandJSON},

		// op.
		{name: "op missing", key: "1", value: `{"user_id":1}`, err: ErrCommandOp},
		{name: "op null", key: "1", value: `{"op":null,"user_id":1}`, err: ErrCommandOp},
		{name: "op capitalised", key: "1", value: `{"op":"Leave","user_id":1}`, err: ErrCommandOp},
		{name: "op upper case", key: "1", value: `{"op":"REJOIN","user_id":1}`, err: ErrCommandOp},
		{name: "op empty", key: "1", value: `{"op":"","user_id":1}`, err: ErrCommandOp},
		{name: "op padded", key: "1", value: `{"op":"leave ","user_id":1}`, err: ErrCommandOp},
		{name: "op unknown", key: "1", value: `{"op":"purge","user_id":1}`, err: ErrCommandOp},
		{name: "op number", key: "1", value: `{"op":1,"user_id":1}`, err: ErrCommandOp},
		{name: "op boolean", key: "1", value: `{"op":true,"user_id":1}`, err: ErrCommandOp},
		{name: "op array", key: "1", value: `{"op":["leave"],"user_id":1}`, err: ErrCommandOp},
		{name: "op object", key: "1", value: `{"op":{"leave":1},"user_id":1}`, err: ErrCommandOp},
		{name: "op lone surrogate", key: "1", value: `{"op":"\ud800","user_id":1}`, err: ErrCommandOp},

		// user_id.
		{name: "user_id missing", key: "1", value: `{"op":"leave"}`, err: ErrCommandUserMissing},
		{name: "user_id null", key: "1", value: `{"op":"leave","user_id":null}`, err: ErrCommandUserMissing},
		{name: "user_id string", key: "1", value: `{"op":"leave","user_id":"1"}`, err: ErrCommandUserInvalid},
		{name: "user_id fraction", key: "1", value: `{"op":"leave","user_id":1.0}`, err: ErrCommandUserInvalid},
		{name: "user_id exponent", key: "100", value: `{"op":"leave","user_id":1e2}`, err: ErrCommandUserInvalid},
		{name: "user_id negative", key: "1", value: `{"op":"leave","user_id":-1}`, err: ErrCommandUserInvalid},
		{name: "user_id minus zero", key: "0", value: `{"op":"leave","user_id":-0}`, err: ErrCommandUserInvalid},
		{name: "user_id overflow", key: "1", value: `{"op":"leave","user_id":18446744073709551616}`, err: ErrCommandUserInvalid},
		{name: "user_id boolean", key: "1", value: `{"op":"leave","user_id":true}`, err: ErrCommandUserInvalid},
		{name: "user_id array", key: "1", value: `{"op":"leave","user_id":[1]}`, err: ErrCommandUserInvalid},
		{name: "user_id mismatch", key: "42", value: `{"op":"leave","user_id":43}`, err: ErrCommandUserMismatch},
		{name: "user_id mismatch above 2^53", key: "9007199254740993", value: `{"op":"leave","user_id":9007199254740992}`, err: ErrCommandUserMismatch},

		// at_ns.
		{name: "at_ns negative", key: "1", value: `{"op":"leave","user_id":1,"at_ns":-1}`, err: ErrCommandAtNs},
		{name: "at_ns fraction", key: "1", value: `{"op":"leave","user_id":1,"at_ns":1.5}`, err: ErrCommandAtNs},
		{name: "at_ns exponent", key: "1", value: `{"op":"leave","user_id":1,"at_ns":1.7646336e18}`, err: ErrCommandAtNs},
		{name: "at_ns string", key: "1", value: `{"op":"leave","user_id":1,"at_ns":"1764633600000000000"}`, err: ErrCommandAtNs},
		{name: "at_ns overflow", key: "1", value: `{"op":"leave","user_id":1,"at_ns":18446744073709551616}`, err: ErrCommandAtNs},
		{name: "at_ns boolean", key: "1", value: `{"op":"leave","user_id":1,"at_ns":false}`, err: ErrCommandAtNs},

		// request_id.
		{name: "request_id number", key: "1", value: `{"op":"leave","user_id":1,"request_id":7}`, err: ErrCommandRequestID},
		{name: "request_id object", key: "1", value: `{"op":"leave","user_id":1,"request_id":{}}`, err: ErrCommandRequestID},
		{name: "request_id too long", key: "1", value: `{"op":"leave","user_id":1,"request_id":"` + strings.Repeat("x", MaxRequestIDBytes+1) + `"}`, err: ErrCommandRequestID},
		{name: "request_id too long after unescaping", key: "1", value: `{"op":"leave","user_id":1,"request_id":"` + strings.Repeat(`\u00e9`, MaxRequestIDBytes/2+1) + `"}`, err: ErrCommandRequestID},
		{name: "request_id invalid UTF-8", key: "1", value: "{\"op\":\"leave\",\"user_id\":1,\"request_id\":\"a\xffb\"}", err: ErrCommandRequestID},
		{name: "request_id lone high surrogate", key: "1", value: `{"op":"leave","user_id":1,"request_id":"a\ud800b"}`, err: ErrCommandRequestID},
		{name: "request_id lone low surrogate", key: "1", value: `{"op":"leave","user_id":1,"request_id":"\udc00"}`, err: ErrCommandRequestID},
		{name: "request_id reversed pair", key: "1", value: `{"op":"leave","user_id":1,"request_id":"\ude00\ud83d"}`, err: ErrCommandRequestID},
		{name: "request_id two high surrogates", key: "1", value: `{"op":"leave","user_id":1,"request_id":"\ud83d\ud83d"}`, err: ErrCommandRequestID},

		// Several faults: the first rule in DecodeCommand's order wins.
		{name: "op before user", key: "1", value: `{"op":"x"}`, err: ErrCommandOp},
		{name: "user before at_ns", key: "1", value: `{"op":"leave","user_id":"1","at_ns":-1}`, err: ErrCommandUserInvalid},
		{name: "mismatch before at_ns", key: "1", value: `{"op":"leave","user_id":2,"at_ns":-1}`, err: ErrCommandUserMismatch},
		{name: "at_ns before request_id", key: "1", value: `{"op":"leave","user_id":1,"at_ns":-1,"request_id":1}`, err: ErrCommandAtNs},
		{name: "duplicate before op", key: "1", value: `{"op":"x","op":"y"}`, err: ErrCommandJSON},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := DecodeCommand([]byte(tt.key), []byte(tt.value))
			if tt.err == nil {
				if err != nil {
					t.Fatalf("DecodeCommand(%q, %q) error: %v", tt.key, tt.value, err)
				}
				if got != tt.want {
					t.Fatalf("DecodeCommand(%q, %q) = %+v, want %+v", tt.key, tt.value, got, tt.want)
				}
				return
			}
			if !errors.Is(err, tt.err) {
				t.Fatalf("DecodeCommand(%q, %q) error = %v, want %v", tt.key, tt.value, err, tt.err)
			}
			var e *Error
			if !errors.As(err, &e) || e.Detail == "" {
				t.Errorf("error %#v: want an *Error with a Detail", err)
			}
			if got != (Command{}) {
				t.Errorf("DecodeCommand returned %+v with an error, want the zero Command", got)
			}
		})
	}
}

func TestCommandValidate(t *testing.T) {
	tests := []struct {
		name string
		c    Command
		err  *Error
	}{
		{name: "leave", c: Command{Op: Leave, UserID: 1}},
		{name: "rejoin with everything", c: Command{Op: Rejoin, UserID: math.MaxUint64, AtNs: math.MaxUint64, HasAt: true, RequestID: "r"}},
		{name: "zero op", c: Command{UserID: 1}, err: ErrCommandOp},
		{name: "unknown op", c: Command{Op: 3, UserID: 1}, err: ErrCommandOp},
		{name: "request_id at the limit", c: Command{Op: Leave, RequestID: strings.Repeat("x", MaxRequestIDBytes)}},
		{name: "request_id too long", c: Command{Op: Leave, RequestID: strings.Repeat("x", MaxRequestIDBytes+1)}, err: ErrCommandRequestID},
		{name: "request_id invalid UTF-8", c: Command{Op: Leave, RequestID: "\xff"}, err: ErrCommandRequestID},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.c.Validate()
			if tt.err == nil && err != nil || tt.err != nil && !errors.Is(err, tt.err) {
				t.Fatalf("%+v.Validate() = %v, want %v", tt.c, err, tt.err)
			}
			// What Validate accepts round-trips; what it rejects does not decode.
			key := AppendUserID(nil, tt.c.UserID)
			got, derr := DecodeCommand(key, AppendCommand(nil, tt.c))
			switch {
			case tt.err == nil && (derr != nil || got != tt.c):
				t.Errorf("round trip of %+v = %+v, %v", tt.c, got, derr)
			case tt.err != nil && ReasonOf(derr) != tt.err.Reason:
				t.Errorf("decoding invalid %+v: error %v, want reason %s", tt.c, derr, tt.err.Reason)
			}
		})
	}
}

func TestAppendCommand(t *testing.T) {
	tests := []struct {
		name string
		c    Command
		want string
	}{
		{name: "minimal", c: Command{Op: Leave, UserID: 42}, want: `{"op":"leave","user_id":42}`},
		{name: "AtNs ignored without HasAt", c: Command{Op: Leave, UserID: 42, AtNs: 9}, want: `{"op":"leave","user_id":42}`},
		{name: "at_ns 0", c: Command{Op: Rejoin, UserID: 0, HasAt: true}, want: `{"op":"rejoin","user_id":0,"at_ns":0}`},
		{name: "everything", c: Command{Op: Leave, UserID: math.MaxUint64, AtNs: math.MaxUint64, HasAt: true, RequestID: "r-1"},
			want: `{"op":"leave","user_id":18446744073709551615,"at_ns":18446744073709551615,"request_id":"r-1"}`},
		{name: "escapes only what JSON requires", c: Command{Op: Leave, UserID: 1, RequestID: "\"\\/\n\r\t\b\f\x00\x1f\x7f<>&é\u2028"},
			want: `{"op":"leave","user_id":1,"request_id":"\"\\/\n\r\t\b\f\u0000\u001f` + "\x7f<>&é\u2028" + `"}`},
		{name: "invalid op written as is", c: Command{Op: 9, UserID: 1}, want: `{"op":"Op(9)","user_id":1}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := string(AppendCommand([]byte("prefix:"), tt.c)); got != "prefix:"+tt.want {
				t.Fatalf("AppendCommand(%+v) =\n%s\nwant\n%s", tt.c, got, "prefix:"+tt.want)
			}
		})
	}
}

func TestOpString(t *testing.T) {
	for op, want := range map[Op]string{0: "Op(0)", Leave: "leave", Rejoin: "rejoin", 255: "Op(255)"} {
		if got := op.String(); got != want {
			t.Errorf("Op(%d).String() = %q, want %q", uint8(op), got, want)
		}
	}
}

func TestDecodeCommandAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("json.Valid's pooled scanner is dropped by the race detector")
	}
	key := []byte("42")
	value := []byte(`{"op":"leave","user_id":42,"at_ns":1764633600000000000,"meta":{"a":[1,2]}}`)
	allocs := testing.AllocsPerRun(1000, func() {
		if _, err := DecodeCommand(key, value); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("DecodeCommand without request_id allocates %v times per call, want 0", allocs)
	}
}

var sinkCommand Command

func BenchmarkDecodeCommand(b *testing.B) {
	cases := []struct{ name, key, value string }{
		{"minimal", "42", `{"op":"leave","user_id":42}`},
		{"full", "9007199254740993", `{"op":"leave","user_id":9007199254740993,"at_ns":1764633600000000000,"request_id":"0b4f6c1e-7d2a-4c1b-9a57-3f2e8d1c6a90"}`},
		{"unknown members", "42", `{"op":"rejoin","user_id":42,"source":"settings-page","client":{"app":"web","version":"4.2.1"},"tags":["a","b","c"]}`},
	}
	for _, tc := range cases {
		b.Run(tc.name, func(b *testing.B) {
			key, value := []byte(tc.key), []byte(tc.value)
			b.ReportAllocs()
			b.SetBytes(int64(len(value)))
			for b.Loop() {
				c, err := DecodeCommand(key, value)
				if err != nil {
					b.Fatal(err)
				}
				sinkCommand = c
			}
		})
	}
}

var sinkBytes []byte

func BenchmarkAppendCommand(b *testing.B) {
	c := Command{Op: Leave, UserID: 9007199254740993, AtNs: 1764633600000000000, HasAt: true, RequestID: "0b4f6c1e-7d2a-4c1b-9a57-3f2e8d1c6a90"}
	buf := make([]byte, 0, 256)
	b.ReportAllocs()
	for b.Loop() {
		sinkBytes = AppendCommand(buf[:0], c)
	}
}
