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
		cl.LateLeaves = append(cl.LateLeaves, topics.LateLeave{LeftAtNs: w.LeftAtNs, ForwardedThroughNs: w.ThroughNs})
	}
	return cl
}

// storeOutbox adds entries to b's outbox and returns them with their
// sequence numbers, to be queued once b commits.
func storeOutbox(b *membership.Batch, entries []outboxEntry) ([]outboxItem, error) {
	items := make([]outboxItem, 0, len(entries))
	for _, e := range entries {
		seq, err := b.AddOutbox(encodeOutbox(e))
		if err != nil {
			return nil, err
		}
		items = append(items, outboxItem{seq: seq, e: e})
	}
	return items, nil
}
