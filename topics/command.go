package topics

import (
	"encoding/json"
	"errors"
	"strconv"
	"unicode/utf8"
)

// Op is what a command asks for.
type Op uint8

// The ops. The zero Op is not one, so a forgotten field is caught.
const (
	Leave  Op = 1 // stop forwarding; the boundary becomes left_at_ns
	Rejoin Op = 2 // resume forwarding; the open leave moves into history
)

// String returns the op's name on the wire, "leave" or "rejoin", or "Op(n)"
// for any other value.
func (o Op) String() string {
	switch o {
	case Leave:
		return "leave"
	case Rejoin:
		return "rejoin"
	}
	return "Op(" + strconv.Itoa(int(o)) + ")"
}

// MaxRequestIDBytes bounds request_id, in bytes of UTF-8 after JSON escapes
// are resolved. It is echoed into the changelog, so it must stay small.
const MaxRequestIDBytes = 256

// Command is one record of the commands topic, decoded.
type Command struct {
	Op     Op
	UserID uint64
	// AtNs is the boundary, in nanoseconds since the Unix epoch; valid only
	// when HasAt. When at_ns is absent, the record timestamp (ms, × 1e6)
	// stands in: the caller does that, this package never reads timestamps.
	AtNs  uint64
	HasAt bool
	// RequestID is optional and echoed to the changelog; "" means none.
	RequestID string
}

// Validate reports whether c is a command DecodeCommand could return: Op is
// Leave or Rejoin, and RequestID is valid UTF-8 of at most
// MaxRequestIDBytes. Any UserID and AtNs are valid.
func (c Command) Validate() error {
	if c.Op != Leave && c.Op != Rejoin {
		return &Error{Reason: ReasonCommandOp, Detail: "op " + c.Op.String() + " is neither leave nor rejoin"}
	}
	return checkRequestID(c.RequestID)
}

func checkRequestID(id string) error {
	if len(id) > MaxRequestIDBytes {
		return requestIDTooLong(len(id))
	}
	if !utf8.ValidString(id) {
		return requestIDNotUTF8(id)
	}
	return nil
}

func requestIDTooLong(n int) error {
	return &Error{Reason: ReasonCommandRequestID,
		Detail: "request_id is " + strconv.Itoa(n) + " bytes, more than " + strconv.Itoa(MaxRequestIDBytes)}
}

func requestIDNotUTF8[T string | []byte](id T) error {
	return &Error{Reason: ReasonCommandRequestID, Detail: "request_id " + quote([]byte(id)) + " is not valid UTF-8"}
}

// The member names, exactly as on the wire.
const (
	memberOp        = "op"
	memberUserID    = "user_id"
	memberAtNs      = "at_ns"
	memberRequestID = "request_id"
)

// DecodeCommand decodes a record of the commands topic: key is the user id in
// decimal ASCII, value one JSON object
//
//	{"op":"leave","user_id":42,"at_ns":1764633600000000000,"request_id":"r-1"}
//
// The rules, each with the Reason of the *[Error] that breaks it, checked in
// this order so that a record with several faults always gets the same one:
//
//  1. key: as [ParseUserID] (key_*, matching [ErrKeyInvalid]).
//  2. value: a single JSON object (RFC 8259), nothing but white space after
//     it; member names match exactly (case-sensitive, after escapes are
//     resolved) and none of op, user_id, at_ns, request_id may appear twice
//     (command_json). Unknown members are ignored, whatever they hold.
//  3. op: "leave" or "rejoin", case-sensitive (command_op).
//  4. user_id: required (command_user_missing); a JSON integer in
//     0..18446744073709551615, no quotes, fraction, exponent or sign, read
//     exactly, never through float64 (command_user_invalid); equal to the key
//     (command_user_mismatch).
//  5. at_ns: optional; same integer rule (command_at_ns). HasAt says whether
//     it was present; when it is not, AtNs is 0.
//  6. request_id: optional string, valid UTF-8 (escaped lone surrogates are
//     refused, not replaced) of at most MaxRequestIDBytes (command_request_id).
//
// A member whose value is null counts as absent, for every member: so
// "op":null is a missing op, "at_ns":null leaves HasAt false. A request_id of
// "" is the same as none.
//
// Besides the error, DecodeCommand allocates only the RequestID string (and
// whatever json.Valid's pooled scanner needs when its pool is empty).
func DecodeCommand(key, value []byte) (Command, error) {
	id, err := ParseUserID(key)
	if err != nil {
		return Command{}, err
	}
	if !json.Valid(value) {
		return Command{}, &Error{Reason: ReasonCommandJSON, Detail: syntaxDetail(value)}
	}
	if first := firstByte(value); first != '{' {
		return Command{}, &Error{Reason: ReasonCommandJSON, Detail: "value is " + kind([]byte{first}) + ", not a JSON object"}
	}

	var op, user, at, request []byte // raw values; nil when absent
	var buf [64]byte                 // room to unescape any spelling of a member name we know
	obj := newObject(value)
	for {
		rawName, raw, ok := obj.next()
		if !ok {
			break
		}
		name := rawName
		if len(rawName) <= len(buf) && containsBackslash(rawName) {
			if name, ok = unquote(buf[:0], rawName); !ok {
				continue // not valid text, so not a member we know
			}
		}
		var slot *[]byte
		switch string(name) {
		case memberOp:
			slot = &op
		case memberUserID:
			slot = &user
		case memberAtNs:
			slot = &at
		case memberRequestID:
			slot = &request
		default:
			continue
		}
		if *slot != nil {
			return Command{}, &Error{Reason: ReasonCommandJSON, Detail: "member " + strconv.Quote(string(name)) + " appears twice"}
		}
		*slot = raw
	}

	var c Command
	if c.Op, err = decodeOp(op); err != nil {
		return Command{}, err
	}
	if isNull(user) {
		return Command{}, &Error{Reason: ReasonCommandUserMissing, Detail: "user_id is missing or null"}
	}
	var problem string
	if c.UserID, problem = parseUint(user); problem != "" {
		return Command{}, &Error{Reason: ReasonCommandUserInvalid, Detail: "user_id " + token(user) + " " + problem}
	}
	if c.UserID != id {
		return Command{}, &Error{Reason: ReasonCommandUserMismatch,
			Detail: "user_id " + strconv.FormatUint(c.UserID, 10) + " differs from key " + strconv.FormatUint(id, 10)}
	}
	if !isNull(at) {
		if c.AtNs, problem = parseUint(at); problem != "" {
			return Command{}, &Error{Reason: ReasonCommandAtNs, Detail: "at_ns " + token(at) + " " + problem}
		}
		c.HasAt = true
	}
	if c.RequestID, err = decodeRequestID(request); err != nil {
		return Command{}, err
	}
	return c, nil
}

func decodeOp(raw []byte) (Op, error) {
	if isNull(raw) {
		return 0, &Error{Reason: ReasonCommandOp, Detail: "op is missing or null"}
	}
	if raw[0] != '"' {
		return 0, &Error{Reason: ReasonCommandOp, Detail: "op is " + kind(raw) + ", not a string"}
	}
	var buf [64]byte
	s := raw[1 : len(raw)-1]
	if len(s) <= len(buf) && containsBackslash(s) {
		s, _ = unquote(buf[:0], s)
	}
	switch string(s) {
	case "leave":
		return Leave, nil
	case "rejoin":
		return Rejoin, nil
	}
	return 0, &Error{Reason: ReasonCommandOp, Detail: "op " + token(raw) + " is neither \"leave\" nor \"rejoin\""}
}

func decodeRequestID(raw []byte) (string, error) {
	if isNull(raw) {
		return "", nil
	}
	if raw[0] != '"' {
		return "", &Error{Reason: ReasonCommandRequestID, Detail: "request_id is " + kind(raw) + ", not a string"}
	}
	s := raw[1 : len(raw)-1]
	if containsBackslash(s) {
		var ok bool
		if s, ok = unquote(make([]byte, 0, len(s)), s); !ok {
			return "", &Error{Reason: ReasonCommandRequestID, Detail: "request_id " + token(raw) + " escapes a lone UTF-16 surrogate"}
		}
	}
	if len(s) > MaxRequestIDBytes {
		return "", requestIDTooLong(len(s))
	}
	if !utf8.Valid(s) {
		return "", requestIDNotUTF8(s)
	}
	return string(s), nil
}

// AppendCommand appends the canonical JSON encoding of c to dst: members in
// the order op, user_id, at_ns, request_id; at_ns only when HasAt,
// request_id only when not empty; no white space; strings escaped only where
// JSON requires it ('"', '\\' and control bytes, as \n or \u00XX).
//
// AppendCommand does not validate c (see [Command.Validate]): an invalid c
// encodes to a value DecodeCommand rejects. For a valid c with AtNs 0 when
// !HasAt, DecodeCommand(AppendUserID(nil, c.UserID), AppendCommand(nil, c))
// returns c.
func AppendCommand(dst []byte, c Command) []byte {
	dst = append(dst, `{"op":`...)
	dst = appendQuoted(dst, c.Op.String())
	dst = append(dst, `,"user_id":`...)
	dst = strconv.AppendUint(dst, c.UserID, 10)
	if c.HasAt {
		dst = append(dst, `,"at_ns":`...)
		dst = strconv.AppendUint(dst, c.AtNs, 10)
	}
	if c.RequestID != "" {
		dst = append(dst, `,"request_id":`...)
		dst = appendQuoted(dst, c.RequestID)
	}
	return append(dst, '}')
}

// syntaxDetail says where value, which json.Valid refused, goes wrong. It
// runs only on that error path, so it may take its time.
func syntaxDetail(value []byte) string {
	var v json.RawMessage
	err := json.Unmarshal(value, &v)
	var se *json.SyntaxError
	if errors.As(err, &se) {
		return "value is not valid JSON: " + se.Error() + " (offset " + strconv.FormatInt(se.Offset, 10) + ")"
	}
	return "value is not valid JSON"
}

func isNull(raw []byte) bool { return raw == nil || raw[0] == 'n' }

func containsBackslash(b []byte) bool {
	for _, c := range b {
		if c == '\\' {
			return true
		}
	}
	return false
}

// firstByte returns the first byte of data that is not JSON white space.
func firstByte(data []byte) byte {
	for _, c := range data {
		switch c {
		case ' ', '\t', '\n', '\r':
		default:
			return c
		}
	}
	return 0
}
