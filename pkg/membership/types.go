package membership

import (
	"fmt"
	"math"
)

// Status is a user's membership of the community layer.
type Status uint8

// Status values. They are stored as the first byte of a current-state value,
// so their numbers must never change.
const (
	Active Status = 0 // signals are forwarded
	Left   Status = 1 // signals are not forwarded
)

// String returns "active" or "left", or "Status(n)" for anything else.
func (s Status) String() string {
	switch s {
	case Active:
		return "active"
	case Left:
		return "left"
	default:
		return fmt.Sprintf("Status(%d)", uint8(s))
	}
}

// CommunityMembership is a user's current state: the spec's record.
type CommunityMembership struct {
	UserID uint64
	Status Status
	// LeftAtNs is the boundary of the open leave, in ns since the Unix
	// epoch. It is meaningful only while Status == Left and 0 otherwise.
	LeftAtNs uint64
}

// LeftAt returns the boundary of the open leave, and false while Active.
func (m CommunityMembership) LeftAt() (ns uint64, ok bool) {
	if m.Status != Left {
		return 0, false
	}
	return m.LeftAtNs, true
}

// OpenEnd is the RejoinedAtNs of an episode that is still open. It is not a
// valid command time. (It is not named Open, which opens a Store.)
const OpenEnd = math.MaxUint64

// Episode is one leave, the half-open interval [LeftAtNs, RejoinedAtNs) in ns
// since the Unix epoch. Signals with an event time inside it are not the
// community's. An open episode has RejoinedAtNs == OpenEnd. A closed episode
// may be empty (LeftAtNs == RejoinedAtNs): a leave and a rejoin with the
// same boundary, which holds no signal.
type Episode struct {
	LeftAtNs     uint64
	RejoinedAtNs uint64
}

// IsOpen reports whether the episode is still open (the user is Left).
func (e Episode) IsOpen() bool { return e.RejoinedAtNs == OpenEnd }

// IsEmpty reports whether the episode holds no instant at all.
func (e Episode) IsEmpty() bool { return e.LeftAtNs == e.RejoinedAtNs }

// Contains reports whether ns falls inside the episode.
func (e Episode) Contains(ns uint64) bool {
	return e.LeftAtNs <= ns && ns < e.RejoinedAtNs
}

// LateLeave is a late-leave window: signals of the user with an event time
// in [LeftAtNs, ForwardedThroughNs], both ends included, in ns since the Unix epoch,
// may have been forwarded although the user had left, because the leave at
// LeftAtNs arrived after they were. The package records it for a purge job
// and does not act on it. ForwardedThroughNs >= LeftAtNs.
type LateLeave struct {
	LeftAtNs           uint64 // the boundary of the leave, the start of one of the user's episodes
	ForwardedThroughNs uint64 // the latest event time that may have been forwarded
	// Exact says that ForwardedThroughNs is the event time of a signal of the user
	// that was forwarded; when false, the caller could not tell which of
	// the user's signals were forwarded and ForwardedThroughNs bounds them.
	Exact bool
}

// merge returns the window that covers both w and o, which start at the same
// LeftAtNs: the later ForwardedThroughNs, exact only if both are. (Two exact windows
// of one leave name forwarded signals, so their maximum does too.)
func (w LateLeave) merge(o LateLeave) LateLeave {
	w.ForwardedThroughNs = max(w.ForwardedThroughNs, o.ForwardedThroughNs)
	w.Exact = w.Exact && o.Exact
	return w
}

// Member is a user's full record: the current state, the closed episodes in
// ascending LeftAtNs order, the late-leave windows in ascending LeftAtNs
// order, and the caller's note, if any.
type Member struct {
	CommunityMembership
	History    []Episode
	LateLeaves []LateLeave
	// Note is the opaque note last set with Batch.SetNote, or nil. The
	// package does not interpret it.
	Note []byte
}

// Episodes appends to dst the closed episodes followed by the open one, if
// the member is Left, and returns the extended slice. The result is
// ascending and disjoint.
func (m Member) Episodes(dst []Episode) []Episode {
	dst = append(dst, m.History...)
	if m.Status == Left {
		dst = append(dst, Episode{LeftAtNs: m.LeftAtNs, RejoinedAtNs: OpenEnd})
	}
	return dst
}

// Command is one membership command as the store applies it: what, for
// whom, at which boundary (ns since the Unix epoch), and the request id the
// producer gave it ("" for none). Its identity is all four fields: a
// command whose identity was applied to the user before is a duplicate and
// changes nothing (see [Batch.Apply]).
type Command struct {
	Op        Op
	UserID    uint64
	AtNs      uint64
	RequestID string
}

// Op is what a membership command asks for.
type Op uint8

// Op values.
const (
	OpLeave  Op = 1
	OpRejoin Op = 2
)

// String returns "leave" or "rejoin", or "Op(n)" for anything else.
func (o Op) String() string {
	switch o {
	case OpLeave:
		return "leave"
	case OpRejoin:
		return "rejoin"
	default:
		return fmt.Sprintf("Op(%d)", uint8(o))
	}
}

// Change describes what one command did.
//
// Before and After may share the backing arrays of History, LateLeaves and
// Note: treat them as read-only. A command changes only the state and the
// history (and carries a late-leave window along when it moves the open
// boundary back); Note is the same in both.
type Change struct {
	Before, After Member
	// Changed is false when the command was a no-op: a duplicate, a leave
	// while Left at a boundary no earlier than left_at, or a rejoin while
	// Active.
	Changed bool
	// Duplicate says the command's identity had been applied to the user
	// before: it changed nothing, whatever the state is now.
	Duplicate bool
	// Closed is the episode a rejoin closed, and nil otherwise.
	Closed *Episode
	// Reopened is the empty closed episode [t, t) that a leave at t took
	// out of the history to make the user Left at t again, and nil
	// otherwise.
	Reopened *Episode
	// MovedFrom is the open boundary a leave moved back from (the user was
	// Left at MovedFrom and is now Left earlier), and 0 otherwise.
	MovedFrom uint64
}
