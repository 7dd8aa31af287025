package membership

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strings"
)

// The store holds five kinds of records. Their key spaces are told apart by
// the first key byte, so no key of one space can equal or fall between keys
// of another whatever follows it: a user ID, topic name, metadata name or
// sequence number can never be mistaken for another kind of record, and a
// bounded scan of one space ([space, space+1)) sees only that space.
//
//	users        0x01 ‖ user_id u64 BE ‖ tag ‖ suffix
//	checkpoints  0x02 ‖ topic ‖ 0x00 ‖ partition u32 BE
//	metadata     0x03 ‖ name
//	outbox       0x04 ‖ seq u64 BE
//	identities   0x05 ‖ user_id u64 BE ‖ digest (16 bytes)
//
// Identities are a space of their own, not a tag of the users space, so
// that restoring the gate (a scan of the users space) never reads them.
const (
	spaceUsers       byte = 0x01
	spaceCheckpoints byte = 0x02
	spaceMeta        byte = 0x03
	spaceOutbox      byte = 0x04
	spaceIdentities  byte = 0x05
)

// Tags of the records in the users key space. The tag follows the user ID, so
// all of one user's records are adjacent, and in tag order: the current state
// and history, then the late-leave windows, then the note.
const (
	// TagCommunityLeave tags the community-membership records: the current
	// state and the closed episodes (the spec's Tag::CommunityLeave).
	TagCommunityLeave = 0x11
	// TagLateLeave tags the late-leave windows of a user.
	TagLateLeave = 0x12
	// TagNote tags the note a caller attached to a user ([Batch.SetNote]).
	TagNote = 0x13
)

// Users key space: encode_key(user_id, tag, suffix) = user_id 8 bytes
// big-endian ‖ tag ‖ suffix, after the space byte. Big-endian makes key order
// user-ID order. One user's records, in key order:
//
//	tag 0x11, suffix empty           current state: [status][left_at_ns u64 LE],
//	                                 exactly 9 bytes, left_at_ns 0 when Active
//	tag 0x11, suffix left_at u64 BE  one closed episode: rejoined_at_ns u64 LE,
//	                                 at or after left_at (equal: empty episode)
//	tag 0x12, suffix left_at u64 BE  one late-leave window: forwarded_through_ns
//	                                 u64 LE, at or after left_at, then a flags
//	                                 byte: 0x01 exact, no other bit set
//	tag 0x13, suffix empty           the note: 1 to MaxNoteLen opaque bytes
//
// A key sorts before every key it prefixes, so a user's history follows the
// current state in time order, and the late-leave windows follow the history
// in time order. A user who never left may have a note and nothing else;
// every other record needs the user's current state, and a late-leave
// window starts where one of the user's episodes starts.
const (
	userPrefixLen     = 1 + 8 + 1 // space, user ID, tag
	stateKeyLen       = userPrefixLen
	historyKeyLen     = userPrefixLen + 8
	lateLeaveKeyLen   = userPrefixLen + 8
	noteKeyLen        = userPrefixLen
	stateValueLen     = 1 + 8
	historyValueLen   = 8
	lateLeaveValueLen = 8 + 1
)

// lateLeaveExact is the flag bit of an exact late-leave window.
const lateLeaveExact = 0x01

// MaxNoteLen is the largest note [Batch.SetNote] takes, in bytes. A note is
// read on every command for its user, so it is kept small.
const MaxNoteLen = 4096

// Checkpoint values are the next offset to read, int64 LE. Topic names end
// at 0x00, which Kafka topic names cannot contain, so one topic's keys are
// never a prefix of another's.
const (
	topicTerminator    = 0x00
	checkpointValueLen = 8
)

// Identities: one record per command applied (or refused) for a user, of
// the user's last IdentityWindow commands, so that the same command
// delivered again is recognised. The key ends with the first 16 bytes of
// SHA-256 over the identity: op (1 byte) ‖ at_ns u64 BE ‖ request_id
// bytes. The value is seq u64 BE ‖ flags (1 byte): seq numbers the user's
// identities in the order they were remembered (the oldest goes first when
// the window is full), and flags say whether and why the command was
// refused: bit 0 a rejoin before the leave, bit 1 a rejoin past
// MaxHistory (at most one is set).
// Stores written before the window have empty values: seq 0, not refused.
// Two distinct identities of one user collide with probability about
// n²/2^129 for n of them: far below anything else that can go wrong.
const (
	identityDigestLen = 16
	identityKeyLen    = 1 + 8 + identityDigestLen
	identityValueLen  = 8 + 1
	identityRefused   = 1 << 0
	identityFull      = 1 << 1
)

// refusal says whether and why a command was refused: its identity
// value's flags.
type refusal byte

const (
	accepted           refusal = 0
	refusedBeforeLeave refusal = identityRefused
	refusedFull        refusal = identityFull
)

// refusalOf returns the refusal an Apply error stands for, and false
// when err is not a refusal.
func refusalOf(err error) (refusal, bool) {
	switch {
	case err == nil:
		return accepted, true
	case errors.Is(err, ErrRejoinBeforeLeave):
		return refusedBeforeLeave, true
	case errors.Is(err, ErrHistoryFull):
		return refusedFull, true
	}
	return accepted, false
}

// again returns the error of a command refused before, delivered again.
func (r refusal) again(c Command) error {
	if r == refusedFull {
		return fmt.Errorf("%w: user %d: the rejoin at %d was refused before", ErrHistoryFull, c.UserID, c.AtNs)
	}
	return fmt.Errorf("%w: user %d: the rejoin at %d was refused before", ErrRejoinBeforeLeave, c.UserID, c.AtNs)
}

// appendIdentityValue appends the value of an identity record.
func appendIdentityValue(dst []byte, seq uint64, r refusal) []byte {
	dst = binary.BigEndian.AppendUint64(dst, seq)
	return append(dst, byte(r))
}

// decodeIdentityValue splits an identity record's value; an empty one
// (written before the window) is seq 0, not refused.
func decodeIdentityValue(v []byte) (seq uint64, r refusal, err error) {
	switch len(v) {
	case 0:
		return 0, accepted, nil
	case identityValueLen:
		switch r := refusal(v[8]); r {
		case accepted, refusedBeforeLeave, refusedFull:
			return binary.BigEndian.Uint64(v), r, nil
		}
		return 0, accepted, fmt.Errorf("identity value with unknown flags %#x", v[8])
	}
	return 0, accepted, fmt.Errorf("identity value of %d bytes, want 0 or %d", len(v), identityValueLen)
}

// Outbox entries: the key is the entry's sequence number, u64 BE so that key
// order is sequence order; the value is the caller's bytes, 1 to
// MaxOutboxValueLen of them. Sequence numbers start at 1; 0 is never
// assigned. The largest number ever assigned is kept under metaOutboxSeqKey
// as a u64 LE, so that a number is not handed out again after every entry
// was deleted.
const (
	outboxKeyLen      = 1 + 8
	outboxSeqValueLen = 8
	metaOutboxSeqName = "outbox-seq"
)

// MaxOutboxValueLen is the largest outbox entry [Batch.AddOutbox] takes, in
// bytes. Entries carry copies of whole Kafka records (a dead letter, say),
// so it is well above Kafka's default max.message.bytes of 1 MiB.
const MaxOutboxValueLen = 16 << 20

// formatVersion is the layout described in this file. It is stored under
// metaFormatKey as a u32 LE when a store is created, and a store whose
// version differs is refused: a reader that guessed at a layout it does not
// know would report wrong boundaries, which is worse than not starting.
//
// Version 2 added the identities space, the flags byte of late-leave
// windows and empty closed episodes. A version-1 store cannot be upgraded in
// place (it never kept identities), so it is refused: the state is rebuilt
// from the commands topic into an empty directory.
const (
	formatVersion  uint32 = 2
	formatValueLen        = 4
	metaFormatName        = "format"
)

var (
	metaFormatKey    = append([]byte{spaceMeta}, metaFormatName...)
	metaOutboxSeqKey = append([]byte{spaceMeta}, metaOutboxSeqName...)
)

// appendUserKey appends the key prefix of userID's records with tag.
func appendUserKey(dst []byte, userID uint64, tag byte) []byte {
	dst = append(dst, spaceUsers)
	dst = binary.BigEndian.AppendUint64(dst, userID)
	return append(dst, tag)
}

// appendStateKey appends the current-state key of userID to dst.
func appendStateKey(dst []byte, userID uint64) []byte {
	return appendUserKey(dst, userID, TagCommunityLeave)
}

// appendHistoryKey appends the key of userID's episode that began at leftAtNs.
func appendHistoryKey(dst []byte, userID, leftAtNs uint64) []byte {
	dst = appendUserKey(dst, userID, TagCommunityLeave)
	return binary.BigEndian.AppendUint64(dst, leftAtNs)
}

// appendLateLeaveKey appends the key of userID's late-leave window of the
// leave at leftAtNs.
func appendLateLeaveKey(dst []byte, userID, leftAtNs uint64) []byte {
	dst = appendUserKey(dst, userID, TagLateLeave)
	return binary.BigEndian.AppendUint64(dst, leftAtNs)
}

// appendNoteKey appends the key of userID's note.
func appendNoteKey(dst []byte, userID uint64) []byte {
	return appendUserKey(dst, userID, TagNote)
}

// appendUserUpperBound appends the exclusive upper bound of userID's
// records: the user's prefix with the tag after the last one. That tag is not
// past 0xff, so the bound cannot overflow into the next user.
func appendUserUpperBound(dst []byte, userID uint64) []byte {
	return appendUserKey(dst, userID, TagNote+1)
}

// encodeState returns the 9-byte value of m's current state.
func encodeState(m CommunityMembership) [stateValueLen]byte {
	var v [stateValueLen]byte
	v[0] = byte(m.Status)
	if m.Status == Left {
		binary.LittleEndian.PutUint64(v[1:], m.LeftAtNs)
	}
	return v
}

// encodeHistory returns the value of a closed episode.
func encodeHistory(e Episode) [historyValueLen]byte {
	var v [historyValueLen]byte
	binary.LittleEndian.PutUint64(v[:], e.RejoinedAtNs)
	return v
}

// encodeLateLeave returns the value of a late-leave window.
func encodeLateLeave(w LateLeave) [lateLeaveValueLen]byte {
	var v [lateLeaveValueLen]byte
	binary.LittleEndian.PutUint64(v[:], w.ForwardedThroughNs)
	if w.Exact {
		v[8] = lateLeaveExact
	}
	return v
}

// appendIdentityKey appends the identity key of c to dst.
func appendIdentityKey(dst []byte, c Command) []byte {
	var head [1 + 8]byte
	head[0] = byte(c.Op)
	binary.BigEndian.PutUint64(head[1:], c.AtNs)
	h := sha256.New()
	h.Write(head[:])
	h.Write([]byte(c.RequestID))
	var sum [sha256.Size]byte
	dst = append(dst, spaceIdentities)
	dst = binary.BigEndian.AppendUint64(dst, c.UserID)
	return append(dst, h.Sum(sum[:0])[:identityDigestLen]...)
}

// recordKind says which record of the users key space a key names. The
// kinds are numbered in key order within a user.
type recordKind uint8

const (
	kindState recordKind = iota + 1
	kindHistory
	kindLateLeave
	kindNote
)

// decodeUserKey splits a users-space key into the user ID and record kind.
// For a history or late-leave key, leftAtNs is the leave's boundary.
func decodeUserKey(key []byte) (userID uint64, kind recordKind, leftAtNs uint64, err error) {
	if len(key) == 0 || key[0] != spaceUsers {
		return 0, 0, 0, corruptf(key, "not in the users key space")
	}
	if len(key) < userPrefixLen {
		return 0, 0, 0, corruptf(key, "users key has %d bytes, want at least %d", len(key), userPrefixLen)
	}
	userID = binary.BigEndian.Uint64(key[1:9])
	switch tag := key[9]; {
	case tag == TagCommunityLeave && len(key) == stateKeyLen:
		return userID, kindState, 0, nil
	case tag == TagCommunityLeave && len(key) == historyKeyLen:
		return userID, kindHistory, binary.BigEndian.Uint64(key[userPrefixLen:]), nil
	case tag == TagCommunityLeave:
		return 0, 0, 0, corruptf(key, "community-leave key has %d bytes, want %d or %d", len(key), stateKeyLen, historyKeyLen)
	case tag == TagLateLeave && len(key) == lateLeaveKeyLen:
		return userID, kindLateLeave, binary.BigEndian.Uint64(key[userPrefixLen:]), nil
	case tag == TagLateLeave:
		return 0, 0, 0, corruptf(key, "late-leave key has %d bytes, want %d", len(key), lateLeaveKeyLen)
	case tag == TagNote && len(key) == noteKeyLen:
		return userID, kindNote, 0, nil
	case tag == TagNote:
		return 0, 0, 0, corruptf(key, "note key has %d bytes, want %d", len(key), noteKeyLen)
	default:
		return 0, 0, 0, corruptf(key, "unknown tag 0x%02x", tag)
	}
}

// decodeStateValue decodes the value of userID's current-state record, whose
// key has already been checked; key is used only to name the record.
func decodeStateValue(key []byte, userID uint64, value []byte) (CommunityMembership, error) {
	if len(value) != stateValueLen {
		return CommunityMembership{}, corruptf(key, "state value has %d bytes, want %d", len(value), stateValueLen)
	}
	m := CommunityMembership{UserID: userID, Status: Status(value[0]), LeftAtNs: binary.LittleEndian.Uint64(value[1:])}
	switch m.Status {
	case Active:
		if m.LeftAtNs != 0 {
			return CommunityMembership{}, corruptf(key, "active state with left_at %d, want 0", m.LeftAtNs)
		}
	case Left:
		if m.LeftAtNs == OpenEnd {
			return CommunityMembership{}, corruptf(key, "left state with left_at OpenEnd (math.MaxUint64)")
		}
	default:
		return CommunityMembership{}, corruptf(key, "unknown status byte 0x%02x", value[0])
	}
	return m, nil
}

// decodeHistoryValue decodes the value of the episode that began at leftAtNs,
// whose key has already been checked; key is used only to name the record.
func decodeHistoryValue(key []byte, leftAtNs uint64, value []byte) (Episode, error) {
	if len(value) != historyValueLen {
		return Episode{}, corruptf(key, "history value has %d bytes, want %d", len(value), historyValueLen)
	}
	e := Episode{LeftAtNs: leftAtNs, RejoinedAtNs: binary.LittleEndian.Uint64(value)}
	if e.RejoinedAtNs < e.LeftAtNs {
		return Episode{}, corruptf(key, "episode rejoined_at %d is before left_at %d", e.RejoinedAtNs, e.LeftAtNs)
	}
	if e.RejoinedAtNs == OpenEnd {
		return Episode{}, corruptf(key, "closed episode with rejoined_at OpenEnd (math.MaxUint64)")
	}
	return e, nil
}

// decodeLateLeaveValue decodes the value of the late-leave window of the
// leave at leftAtNs, whose key has already been checked; key is used only to
// name the record.
func decodeLateLeaveValue(key []byte, leftAtNs uint64, value []byte) (LateLeave, error) {
	if len(value) != lateLeaveValueLen {
		return LateLeave{}, corruptf(key, "late-leave value has %d bytes, want %d", len(value), lateLeaveValueLen)
	}
	w := LateLeave{LeftAtNs: leftAtNs, ForwardedThroughNs: binary.LittleEndian.Uint64(value[:8])}
	switch flags := value[8]; flags {
	case 0:
	case lateLeaveExact:
		w.Exact = true
	default:
		return LateLeave{}, corruptf(key, "late-leave flags 0x%02x, want 0x00 or 0x01", flags)
	}
	if w.ForwardedThroughNs < w.LeftAtNs {
		return LateLeave{}, corruptf(key, "late-leave window forwarded through %d, before its left_at %d", w.ForwardedThroughNs, w.LeftAtNs)
	}
	return w, nil
}

// validNote reports why note cannot be stored, or nil.
func validNote(userID uint64, note []byte) error {
	if len(note) == 0 || len(note) > MaxNoteLen {
		return errInvalidf("note of user %d has %d bytes, want 1 to %d", userID, len(note), MaxNoteLen)
	}
	return nil
}

// checkNoteValue checks the value of a note record, whose key has already
// been checked; key is used only to name the record.
func checkNoteValue(key, value []byte) error {
	if len(value) == 0 || len(value) > MaxNoteLen {
		return corruptf(key, "note value has %d bytes, want 1 to %d", len(value), MaxNoteLen)
	}
	return nil
}

// appendOutboxKey appends the key of the outbox entry seq.
func appendOutboxKey(dst []byte, seq uint64) []byte {
	dst = append(dst, spaceOutbox)
	return binary.BigEndian.AppendUint64(dst, seq)
}

// validOutboxValue reports why value cannot be an outbox entry, or nil.
func validOutboxValue(value []byte) error {
	if len(value) == 0 || len(value) > MaxOutboxValueLen {
		return errInvalidf("outbox entry has %d bytes, want 1 to %d", len(value), MaxOutboxValueLen)
	}
	return nil
}

// decodeOutboxKey decodes the key of an outbox entry.
func decodeOutboxKey(key []byte) (seq uint64, err error) {
	if len(key) == 0 || key[0] != spaceOutbox {
		return 0, corruptf(key, "not in the outbox key space")
	}
	if len(key) != outboxKeyLen {
		return 0, corruptf(key, "outbox key has %d bytes, want %d", len(key), outboxKeyLen)
	}
	seq = binary.BigEndian.Uint64(key[1:])
	if seq == 0 {
		return 0, corruptf(key, "outbox sequence number 0 is never assigned")
	}
	return seq, nil
}

// checkOutboxValue checks the value of an outbox entry; key names the record.
func checkOutboxValue(key, value []byte) error {
	if len(value) == 0 || len(value) > MaxOutboxValueLen {
		return corruptf(key, "outbox value has %d bytes, want 1 to %d", len(value), MaxOutboxValueLen)
	}
	return nil
}

// encodeOutboxSeq returns the value of the outbox high-water mark.
func encodeOutboxSeq(seq uint64) [outboxSeqValueLen]byte {
	var v [outboxSeqValueLen]byte
	binary.LittleEndian.PutUint64(v[:], seq)
	return v
}

// decodeOutboxSeq decodes the outbox high-water mark: the largest sequence
// number ever assigned.
func decodeOutboxSeq(key, value []byte) (uint64, error) {
	if !bytes.Equal(key, metaOutboxSeqKey) {
		return 0, corruptf(key, "not the outbox-seq key")
	}
	if len(value) != outboxSeqValueLen {
		return 0, corruptf(key, "outbox-seq value has %d bytes, want %d", len(value), outboxSeqValueLen)
	}
	return binary.LittleEndian.Uint64(value), nil
}

// validTopic reports why topic cannot be a checkpoint topic, or nil.
func validTopic(topic string) error {
	if topic == "" {
		return errInvalidf("topic is empty")
	}
	if i := strings.IndexByte(topic, topicTerminator); i >= 0 {
		return errInvalidf("topic %q contains 0x00 at byte %d", topic, i)
	}
	return nil
}

// appendCheckpointPrefix appends the prefix shared by the checkpoints of one
// topic, which must be valid.
func appendCheckpointPrefix(dst []byte, topic string) []byte {
	dst = append(dst, spaceCheckpoints)
	dst = append(dst, topic...)
	return append(dst, topicTerminator)
}

// appendCheckpointKey appends the checkpoint key of (topic, partition), both
// of which must be valid.
func appendCheckpointKey(dst []byte, topic string, partition int32) []byte {
	dst = appendCheckpointPrefix(dst, topic)
	return binary.BigEndian.AppendUint32(dst, uint32(partition))
}

// encodeCheckpoint returns the value of a checkpoint.
func encodeCheckpoint(next int64) [checkpointValueLen]byte {
	var v [checkpointValueLen]byte
	binary.LittleEndian.PutUint64(v[:], uint64(next))
	return v
}

// decodeCheckpointKey splits a checkpoint key.
func decodeCheckpointKey(key []byte) (topic string, partition int32, err error) {
	if len(key) == 0 || key[0] != spaceCheckpoints {
		return "", 0, corruptf(key, "not in the checkpoints key space")
	}
	rest := key[1:]
	end := bytes.IndexByte(rest, topicTerminator)
	switch {
	case end < 0:
		return "", 0, corruptf(key, "checkpoint key has no topic terminator")
	case end == 0:
		return "", 0, corruptf(key, "checkpoint key has an empty topic")
	case len(rest)-end-1 != 4:
		return "", 0, corruptf(key, "checkpoint key has %d partition bytes, want 4", len(rest)-end-1)
	}
	p := binary.BigEndian.Uint32(rest[end+1:])
	if p > math.MaxInt32 {
		return "", 0, corruptf(key, "checkpoint key has negative partition %d", int32(p))
	}
	return string(rest[:end]), int32(p), nil
}

// decodeCheckpointValue decodes a checkpoint value; key names the record.
func decodeCheckpointValue(key, value []byte) (next int64, err error) {
	if len(value) != checkpointValueLen {
		return 0, corruptf(key, "checkpoint value has %d bytes, want %d", len(value), checkpointValueLen)
	}
	next = int64(binary.LittleEndian.Uint64(value))
	if next < 0 {
		return 0, corruptf(key, "checkpoint offset %d is negative", next)
	}
	return next, nil
}

// encodeFormat returns the value of the format-version record.
func encodeFormat(v uint32) [formatValueLen]byte {
	var b [formatValueLen]byte
	binary.LittleEndian.PutUint32(b[:], v)
	return b
}

// decodeFormat decodes the format-version record. It does not judge the
// version; Open does.
func decodeFormat(key, value []byte) (uint32, error) {
	if !bytes.Equal(key, metaFormatKey) {
		return 0, corruptf(key, "not the format key")
	}
	if len(value) != formatValueLen {
		return 0, corruptf(key, "format value has %d bytes, want %d", len(value), formatValueLen)
	}
	return binary.LittleEndian.Uint32(value), nil
}
