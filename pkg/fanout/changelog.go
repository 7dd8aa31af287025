package fanout

import (
	"github.com/cohortgate/cohortgate/pkg/membership"
	"github.com/cohortgate/cohortgate/topics"
)

// changelogOf renders a member and the note of its last command as the
// changelog record: what the purge job reads and the status API answers.
func changelogOf(m membership.Member, note topics.Note) topics.MemberRecord {
	cl := topics.MemberRecord{
		UserID:     m.UserID,
		Status:     m.Status.String(),
		History:    make([]topics.Episode, 0, len(m.History)),
		LateLeaves: make([]topics.LateLeave, 0, len(m.LateLeaves)),
		Command:    note.Command,
		Receipt:    note.Receipt,
	}
	if at, ok := m.LeftAt(); ok {
		cl.LeftAtNs = &at
	}
	for _, e := range m.History {
		cl.History = append(cl.History, topics.Episode{LeftAtNs: e.LeftAtNs, RejoinedAtNs: e.RejoinedAtNs})
	}
	for _, w := range m.LateLeaves {
		cl.LateLeaves = append(cl.LateLeaves, topics.LateLeave{LeftAtNs: w.LeftAtNs, ForwardedThroughNs: w.ForwardedThroughNs, Exact: w.Exact})
	}
	return cl
}

// trimChangelog returns the changelog record value with the oldest history
// episodes left out (and counted in history_omitted) so that it takes at
// most budget bytes, or false when it cannot be made to fit. The late-leave
// windows, status and command stay: they are what the purge job must not
// lose.
func trimChangelog(value []byte, budget int) ([]byte, bool) {
	m, err := topics.DecodeMemberRecord(value)
	if err != nil {
		return nil, false
	}
	for keep := len(m.History); keep >= 0; keep /= 2 {
		t := m
		t.HistoryOmitted = m.HistoryOmitted + len(m.History) - keep
		t.History = m.History[len(m.History)-keep:]
		if v := topics.AppendMemberRecord(nil, t); len(v) <= budget {
			return v, true
		}
		if keep == 0 {
			break
		}
	}
	return nil, false
}
