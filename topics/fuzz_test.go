package topics

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"
	"strconv"
	"testing"
)

// Seed corpora live in testdata/fuzz/<FuzzName>/. Run a fuzzer with, e.g.,
//
//	go test ./topics -run '^$' -fuzz '^FuzzDecodeCommand$' -fuzztime 60s -parallel 1

// FuzzParseUserID checks ParseUserID against strconv: a key is accepted
// exactly when strconv.ParseUint accepts it and FormatUint spells it the same
// way, and a rejection carries the reason that fits.
func FuzzParseUserID(f *testing.F) {
	f.Fuzz(func(t *testing.T, key []byte) {
		got, err := ParseUserID(key)
		want, perr := strconv.ParseUint(string(key), 10, 64)
		canonical := perr == nil && strconv.FormatUint(want, 10) == string(key)
		if (err == nil) != canonical {
			t.Fatalf("ParseUserID(%q) = %d, %v; strconv says %d, %v", key, got, err, want, perr)
		}
		if err == nil {
			if got != want {
				t.Fatalf("ParseUserID(%q) = %d, want %d", key, got, want)
			}
			if back := AppendUserID(nil, got); !bytes.Equal(back, key) {
				t.Fatalf("AppendUserID(%d) = %q, want %q", got, back, key)
			}
			return
		}
		if !errors.Is(err, ErrKeyInvalid) {
			t.Fatalf("ParseUserID(%q) error %v does not match ErrKeyInvalid", key, err)
		}
		allDigits := !slices.ContainsFunc(key, func(c byte) bool { return c < '0' || c > '9' })
		var reason Reason
		switch {
		case len(key) == 0:
			reason = ReasonKeyEmpty
		case !allDigits:
			reason = ReasonKeyNotDecimal
		case key[0] == '0':
			reason = ReasonKeyLeadingZero
		case errors.Is(perr, strconv.ErrRange):
			reason = ReasonKeyOverflow
		}
		if got := ReasonOf(err); got != reason {
			t.Fatalf("ParseUserID(%q) reason %q, want %q (%v)", key, got, reason, err)
		}
	})
}

// FuzzDecodeCommand checks that DecodeCommand never panics, that what it
// accepts round-trips through AppendCommand and agrees with encoding/json,
// and that what it rejects carries a known reason.
func FuzzDecodeCommand(f *testing.F) {
	f.Fuzz(func(t *testing.T, key, value []byte) {
		c, err := DecodeCommand(key, value)
		if err != nil {
			checkRejection(t, key, value, err)
			return
		}
		if verr := c.Validate(); verr != nil {
			t.Fatalf("accepted %q, %q as %+v, which does not validate: %v", key, value, c, verr)
		}
		if !c.HasAt && c.AtNs != 0 {
			t.Fatalf("accepted %+v: AtNs set without HasAt", c)
		}
		if k := AppendUserID(nil, c.UserID); !bytes.Equal(k, key) {
			t.Fatalf("accepted key %q for user %d", key, c.UserID)
		}
		enc := AppendCommand(nil, c)
		if !json.Valid(enc) {
			t.Fatalf("AppendCommand(%+v) = %q, not valid JSON", c, enc)
		}
		again, err := DecodeCommand(key, enc)
		if err != nil || again != c {
			t.Fatalf("round trip of %+v through %s = %+v, %v", c, enc, again, err)
		}
		if re := AppendCommand(nil, again); !bytes.Equal(re, enc) {
			t.Fatalf("canonical form is not a fixed point: %s then %s", enc, re)
		}
		agreeWithEncodingJSON(t, value, c)
	})
}

// checkRejection checks that err is an *Error with a published reason that
// fits what is wrong with key and value.
func checkRejection(t *testing.T, key, value []byte, err error) {
	t.Helper()
	reason := ReasonOf(err)
	if !slices.Contains(Reasons(), reason) || !errors.Is(err, &Error{Reason: reason}) {
		t.Fatalf("DecodeCommand(%q, %q) error %v has unknown reason %q", key, value, err, reason)
	}
	if _, kerr := ParseUserID(key); kerr != nil {
		if ReasonOf(kerr) != reason {
			t.Fatalf("DecodeCommand(%q, %q) = %v, but the key is bad: %v", key, value, err, kerr)
		}
		return
	}
	if reason.isKey() {
		t.Fatalf("DecodeCommand(%q, %q) = %v for a good key", key, value, err)
	}
	var m map[string]json.RawMessage
	objectOK := json.Unmarshal(value, &m) == nil && m != nil
	if objectOK == (reason == ReasonCommandJSON) && !(reason == ReasonCommandJSON && knownDuplicate(value)) {
		t.Fatalf("DecodeCommand(%q, %q) = %v, but encoding/json reads an object: %t", key, value, err, objectOK)
	}
}

// knownDuplicate reports whether the JSON object value names one of the
// command's members twice.
func knownDuplicate(value []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(value))
	if _, err := dec.Token(); err != nil { // '{'
		return false
	}
	seen := map[string]bool{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		name := tok.(string)
		switch name {
		case memberOp, memberUserID, memberAtNs, memberRequestID:
			if seen[name] {
				return true
			}
			seen[name] = true
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return false
		}
	}
	return false
}

// agreeWithEncodingJSON checks an accepted command against what
// encoding/json reads from the same value.
func agreeWithEncodingJSON(t *testing.T, value []byte, c Command) {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(value, &m); err != nil {
		t.Fatalf("accepted %q, which encoding/json refuses: %v", value, err)
	}
	var op string
	if err := json.Unmarshal(m[memberOp], &op); err != nil || op != c.Op.String() {
		t.Fatalf("accepted %q as op %s; encoding/json reads %q, %v", value, c.Op, op, err)
	}
	if got := string(m[memberUserID]); got != strconv.FormatUint(c.UserID, 10) {
		t.Fatalf("accepted %q as user %d; encoding/json reads %s", value, c.UserID, got)
	}
	at, hasAt := m[memberAtNs]
	if hasAt && string(at) == "null" {
		hasAt = false
	}
	if hasAt != c.HasAt || hasAt && string(at) != strconv.FormatUint(c.AtNs, 10) {
		t.Fatalf("accepted %q as at_ns %d (%t); encoding/json reads %s", value, c.AtNs, c.HasAt, at)
	}
	var id string
	if raw, ok := m[memberRequestID]; ok {
		if err := json.Unmarshal(raw, &id); err != nil {
			t.Fatalf("accepted %q; encoding/json cannot read its request_id: %v", value, err)
		}
	}
	if id != c.RequestID {
		t.Fatalf("accepted %q as request_id %q; encoding/json reads %q", value, c.RequestID, id)
	}
}
