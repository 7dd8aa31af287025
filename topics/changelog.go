package topics

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
)

// MemberRecord is the value of a membership.changelog record, keyed by user id:
// the user's whole membership record after one applied command. The topic
// is compacted, so the latest record per user is the user's state; it is
// what the purge job reads, and the processor's status API answers the same
// shape. All times are nanoseconds since the Unix epoch. The processor
// writes no tombstone (a nil value); one written by others changes no
// state, and a restore from the changelog never takes its user for one
// who never left (docs/client.md, "Tombstones").
//
//	{"user_id":42,"status":"left","left_at_ns":1764633600000000000,
//	 "history":[{"left_at_ns":1700000000000000000,"rejoined_at_ns":1710000000000000000}],
//	 "late_leaves":[],
//	 "command":{"op":"leave","at_ns":1764633600000000000,"topic":"membership.commands",
//	            "partition":3,"offset":17,"request_id":"r-1","changed":true},
//	 "receipt":{"applied_at_ns":1764633600120000000,"signals_partition":3,"signals_offset":5120}}
type MemberRecord struct {
	UserID uint64 `json:"user_id"`
	// Status is "active" or "left".
	Status string `json:"status"`
	// LeftAtNs is the open leave's boundary; null while active.
	LeftAtNs *uint64 `json:"left_at_ns"`
	// History lists the closed leave episodes, ascending; never null.
	History []Episode `json:"history"`
	// HistoryOmitted is how many of the oldest episodes a record leaves
	// out because the whole history did not fit the changelog topic's
	// max.message.bytes; absent (0) otherwise. Compaction keeps only a
	// user's latest record, so the changelog may hold them nowhere else.
	// They are closed episodes, which held no forwarded signal of the
	// user outside LateLeaves, which a record never leaves out; the
	// processor's store keeps the whole history, and its status API
	// answers it.
	HistoryOmitted int `json:"history_omitted,omitempty"`
	// LateLeaves lists the windows in which signals of this user may have
	// been forwarded although the user had left: leaves that reached the
	// processor after signals with later event times had been allowed
	// (beyond the grace). Never null.
	LateLeaves []LateLeave `json:"late_leaves"`
	// Command is the command this record follows; absent for a user the
	// processor has no command for.
	Command *CommandRef `json:"command,omitempty"`
	// Receipt says when and from where Command took effect.
	Receipt *Receipt `json:"receipt,omitempty"`
}

// HeaderRestore is a header of every changelog record the processor
// writes: its own binary copy of the user's stored records (state,
// history, late-leave windows, note and the identities of the commands
// applied to the user), with the commands offset the record reflects. A
// new owner of the user's partition with no state of its own restores the
// user from it instead of replaying the commands. It is the processor's,
// not the purge job's: its layout is pkg/membership's dump format, behind
// a version byte (2), the commands topic's partition count
// when the command was applied (big-endian uint32) and the offset (uint64). A record left without it (one trimmed to
// fit, with history_omitted) makes the next owner replay.
const HeaderRestore = "cohortgate.restore"

// Episode is a closed leave episode [LeftAtNs, RejoinedAtNs): the user's
// signals with event times in it were never forwarded.
type Episode struct {
	LeftAtNs     uint64 `json:"left_at_ns"`
	RejoinedAtNs uint64 `json:"rejoined_at_ns"`
}

// LateLeave is a window [LeftAtNs, ForwardedThroughNs] of event times in
// which signals of a user who had left may have been forwarded, because the
// leave arrived after signals up to ForwardedThroughNs had been allowed.
// The purge job removes the user's contributions in it.
type LateLeave struct {
	LeftAtNs           uint64 `json:"left_at_ns"`
	ForwardedThroughNs uint64 `json:"forwarded_through_ns"`
	// Exact says ForwardedThroughNs is the event time of a forwarded signal
	// of the user; false when the processor could not tell which of the
	// user's signals were forwarded (decided by a previous owner of the
	// partition, or longer ago than it keeps a record of) and bounds them
	// by the latest event time decided on the partition.
	Exact bool `json:"exact"`
}

// CommandRef identifies an applied command and what it did.
type CommandRef struct {
	Op    string `json:"op"`    // "leave" or "rejoin"
	AtNs  uint64 `json:"at_ns"` // the boundary used: at_ns, or the record timestamp
	Topic string `json:"topic"`
	// Partitions is the commands topic's partition count when the
	// command was applied (0 in records of older versions). Counts only
	// grow, and under one count all of a user's commands are applied in
	// one partition: a user's records are ordered by (Partitions, Offset),
	// the order of the commands they follow, whichever changelog
	// partition holds them.
	Partitions int32  `json:"partitions,omitempty"`
	Partition  int32  `json:"partition"`
	Offset     int64  `json:"offset"`
	RequestID  string `json:"request_id,omitempty"`
	// Changed is false for a command that changed nothing: a duplicate, a
	// leave while left at no earlier boundary, a rejoin while active.
	Changed bool `json:"changed"`
	// Duplicate says the command had been applied before (same op, user,
	// boundary and request id): the record restates the user's state.
	Duplicate bool `json:"duplicate,omitempty"`
}

// Receipt proves when a command became effective.
type Receipt struct {
	// AppliedAtNs is the processor's wall clock when the command was in
	// force in its gate. Unlike everything else in a record, it differs
	// between two runs over the same input.
	AppliedAtNs int64 `json:"applied_at_ns"`
	// SignalsPartition is the signals partition the command governs.
	SignalsPartition int32 `json:"signals_partition"`
	// SignalsOffset is the signals offset from which every decision was
	// taken with the command in force; -1 when no signal of the partition
	// had been decided by this processor since it took the partition over,
	// so every signal from the group's committed offset on.
	SignalsOffset int64 `json:"signals_offset"`
	// Inputs, with more than one route, are the offsets of partition
	// SignalsPartition of every route's input from which every decision
	// was taken with the command in force (-1 as in SignalsOffset), in the
	// order of the routes: the first is the signals topic's, SignalsOffset.
	// Absent with one route.
	Inputs []InputOffset `json:"inputs,omitempty"`
}

// InputOffset is an offset in one route's input topic.
type InputOffset struct {
	Topic  string `json:"topic"`
	Offset int64  `json:"offset"`
}

// Note is what the processor keeps beside a user's state about the command
// that last touched it: the Command and Receipt of the next changelog
// record and of the status API.
type Note struct {
	Command *CommandRef `json:"command,omitempty"`
	Receipt *Receipt    `json:"receipt,omitempty"`
}

// ErrChangelog is wrapped by every changelog or note decoding error.
var ErrChangelog = errors.New("topics: malformed changelog value")

// AppendMemberRecord appends c's JSON encoding to dst.
func AppendMemberRecord(dst []byte, c MemberRecord) []byte {
	if c.History == nil {
		c.History = []Episode{}
	}
	if c.LateLeaves == nil {
		c.LateLeaves = []LateLeave{}
	}
	return appendJSON(dst, c)
}

// DecodeMemberRecord reads a changelog value. Unknown members are ignored so
// that the record can grow; a missing user_id or status is an error. A
// missing history or late_leaves reads as empty, never nil.
func DecodeMemberRecord(b []byte) (MemberRecord, error) {
	var c struct {
		MemberRecord
		UserID *uint64 `json:"user_id"`
	}
	if err := decodeJSON(b, &c); err != nil {
		return MemberRecord{}, err
	}
	if c.UserID == nil {
		return MemberRecord{}, fmt.Errorf("%w: no user_id", ErrChangelog)
	}
	c.MemberRecord.UserID = *c.UserID
	if c.History == nil {
		c.History = []Episode{}
	}
	if c.LateLeaves == nil {
		c.LateLeaves = []LateLeave{}
	}
	switch c.Status {
	case "active", "left":
	default:
		return MemberRecord{}, fmt.Errorf("%w: status %q", ErrChangelog, c.Status)
	}
	if (c.Status == "left") != (c.LeftAtNs != nil) {
		return MemberRecord{}, fmt.Errorf("%w: status %s with left_at_ns %v", ErrChangelog, c.Status, c.LeftAtNs != nil)
	}
	return c.MemberRecord, nil
}

// AppendNote appends n's JSON encoding to dst.
func AppendNote(dst []byte, n Note) []byte { return appendJSON(dst, n) }

// DecodeNote reads a note.
func DecodeNote(b []byte) (Note, error) {
	var n Note
	err := decodeJSON(b, &n)
	return n, err
}

func appendJSON(dst []byte, v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		// Only integers, strings, slices and pointers to them.
		panic(fmt.Sprintf("topics: encoding %T: %v", v, err))
	}
	return append(dst, b...)
}

func decodeJSON(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("%w: %v", ErrChangelog, err)
	}
	if _, err := dec.Token(); err == nil {
		return fmt.Errorf("%w: trailing data", ErrChangelog)
	}
	return nil
}
