package oracle

import "slices"

// episode is one leave episode [leftAt, rejoinedAt) of a user, in ns since
// the Unix epoch; open is true for the episode of a user still Left, which
// runs to infinity (rejoinedAt is then 0 and means nothing). An empty
// episode [t, t) holds no time at all.
type episode struct {
	leftAt, rejoinedAt uint64
	open               bool
}

// contains reports whether event time ns lies in e.
func (e episode) contains(ns int64) bool {
	if ns < 0 || uint64(ns) < e.leftAt {
		return false
	}
	return e.open || uint64(ns) < e.rejoinedAt
}

// identity is a command's identity (rule C5); an absent request_id is "".
type identity struct {
	op        op
	boundary  uint64
	requestID string
}

// identityWindow is how many identities of a user rule C5 remembers: those of the
// user's last 64 commands that reached rule C6 or C7.
const identityWindow = 64

// maxHistory is the most closed episodes a user keeps (rule C7): a rejoin
// that would close one more is refused and the user stays left.
const maxHistory = 10000

// member is one user's state in the model (rules C5-C7). The zero value
// is a user who never left: Active, no history.
//
// Invariants: history is ordered and its episodes are disjoint and
// closed (leftAt <= rejoinedAt); while left, leftAt is at or after the end
// of the last closed episode. recent holds the identities of the last
// identityWindow commands that reached rule C6 or C7, applied, unchanged or
// refused, oldest first; refusedIDs those of them C7 refused, with why.
type member struct {
	left       bool
	leftAt     uint64
	history    []episode
	recent     []identity
	refusedIDs map[identity]outcome
}

// outcome is what one command did to its user.
type outcome uint8

const (
	changed   outcome = iota + 1 // the state changed
	unchanged                    // a new command that changed nothing
	duplicate                    // its identity was seen before: a no-op (C5)
	refused                      // a rejoin before the open leave, or its re-delivery: to the DLQ (C7)
	full                         // a rejoin past maxHistory closed episodes, or its re-delivery: to the DLQ, the user stays left (C7)
)

// apply applies one command with its boundary (rule C4 already passed) to
// the user, by rules C5, C6 and C7.
func (m *member) apply(o op, boundary uint64, requestID string) outcome {
	id := identity{op: o, boundary: boundary, requestID: requestID}
	if slices.Contains(m.recent, id) {
		if why, ok := m.refusedIDs[id]; ok {
			return why // refused again, not "applied before"
		}
		return duplicate
	}
	if len(m.recent) == identityWindow {
		delete(m.refusedIDs, m.recent[0])
		m.recent = slices.Delete(m.recent, 0, 1)
	}
	m.recent = append(m.recent, id)
	var out outcome
	if o == opLeave {
		out = m.leave(boundary)
	} else {
		out = m.rejoin(boundary)
	}
	if out == refused || out == full {
		if m.refusedIDs == nil {
			m.refusedIDs = make(map[identity]outcome)
		}
		m.refusedIDs[id] = out
	}
	return out
}

// leave is rule C6.
func (m *member) leave(b uint64) outcome {
	last := len(m.history) - 1
	if last >= 0 && b < m.history[last].rejoinedAt {
		b = m.history[last].rejoinedAt // history is never rewritten
	}
	switch {
	case !m.left:
		m.left, m.leftAt = true, b
	case b < m.leftAt:
		m.leftAt = b // privacy first: the earliest boundary wins
	default:
		return unchanged
	}
	if last >= 0 && m.history[last].leftAt == m.leftAt {
		// Only an empty episode [t, t) can start where the user now
		// leaves (b is at or after its end): it is reopened.
		m.history = m.history[:last]
	}
	return changed
}

// rejoin is rule C7.
func (m *member) rejoin(b uint64) outcome {
	switch {
	case !m.left:
		return unchanged
	case b < m.leftAt:
		return refused
	case len(m.history) >= maxHistory:
		return full
	}
	m.history = append(m.history, episode{leftAt: m.leftAt, rejoinedAt: b})
	m.left, m.leftAt = false, 0
	return changed
}

// episodes returns the user's episodes: the closed ones in order, then the
// open one if the user is Left. A nil member is a user without commands.
func (m *member) episodes() []episode {
	if m == nil {
		return nil
	}
	out := append([]episode(nil), m.history...)
	if m.left {
		out = append(out, episode{leftAt: m.leftAt, open: true})
	}
	return out
}

// holds reports whether event time ns lies in one of the user's episodes:
// a signal stamped then must not be forwarded (S5).
func (m *member) holds(ns int64) bool {
	if m == nil {
		return false
	}
	for _, e := range m.history {
		if e.contains(ns) {
			return true
		}
	}
	return m.left && (episode{leftAt: m.leftAt, open: true}).contains(ns)
}
