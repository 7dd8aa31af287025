package fanout

import (
	"github.com/cohortgate/cohortgate/pkg/gate"
	"github.com/cohortgate/cohortgate/pkg/membership"
)

// Episodes as the store keeps them (membership) and as the gate takes
// them.

// gateEpisodes appends eps, converted, to dst. Empty episodes hold no
// signal and are left out.
func gateEpisodes(dst []gate.Episode, eps []membership.Episode) []gate.Episode {
	for _, e := range eps {
		if !e.IsEmpty() {
			dst = append(dst, gate.Episode{LeftAtNs: e.LeftAtNs, RejoinedAtNs: e.RejoinedAtNs})
		}
	}
	return dst
}

// episodeEnd returns the end of m's episode that starts at left
// (membership.OpenEnd for the open one), and false when none does.
func episodeEnd(m membership.Member, left uint64) (uint64, bool) {
	if m.Status == membership.Left && m.LeftAtNs == left {
		return membership.OpenEnd, true
	}
	for _, e := range m.History {
		if e.LeftAtNs == left {
			return e.RejoinedAtNs, true
		}
	}
	return 0, false
}
