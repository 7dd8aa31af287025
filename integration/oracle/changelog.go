package oracle

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
)

// window is a late-leave window [leftAt, through] of a changelog record
// (README, "Late-leave windows"), in ns; both ends are included. exact is
// false for a conservative window, recorded when the processor could not
// know which signals it had forwarded.
type window struct {
	leftAt, through uint64
	exact           bool
}

// covers reports whether w covers o: starts no later and ends no earlier.
// A window moved back to an earlier boundary, or recorded again with a
// later end, covers the one it replaced.
func (w window) covers(o window) bool { return w.leftAt <= o.leftAt && w.through >= o.through }

// holds reports whether event time ns lies in w.
func (w window) holds(ns int64) bool {
	return ns >= 0 && uint64(ns) >= w.leftAt && uint64(ns) <= w.through
}

func (w window) String() string {
	return fmt.Sprintf("[%d,%d] exact=%v", w.leftAt, w.through, w.exact)
}

// changelogRecord is one decoded record of the changelog topic: what the
// purge job reads. command is where the command the record follows was
// read ("<topic>/<partition>/<offset>"), "" when the record names none.
type changelogRecord struct {
	userID  uint64
	left    bool
	leftAt  uint64 // meaningful only when left
	history []episode
	windows []window
	command string
	// order is where the record's command stands among its user's
	// commands: the commands topic's partition count when it was
	// applied, then its offset (docs/client.md, "Record formats"); ok is false
	// when the record names no command.
	order struct {
		partitions, offset uint64
		ok                 bool
	}
}

// episodes returns the record's episodes as member.episodes does: closed
// ones in order, then the open one.
func (c changelogRecord) episodes() []episode {
	out := append([]episode(nil), c.history...)
	if c.left {
		out = append(out, episode{leftAt: c.leftAt, open: true})
	}
	return out
}

// The changelog record on the wire (docs/client.md, "Record formats"). Numbers are
// json.Number so that no ns value passes through a float64.
type (
	wireChangelog struct {
		UserID     json.Number     `json:"user_id"`
		Status     string          `json:"status"`
		LeftAtNs   *json.Number    `json:"left_at_ns"`
		History    []wireEpisode   `json:"history"`
		LateLeaves []wireLateLeave `json:"late_leaves"`
		Command    *wireCommand    `json:"command"`
	}
	wireEpisode struct {
		LeftAtNs     json.Number `json:"left_at_ns"`
		RejoinedAtNs json.Number `json:"rejoined_at_ns"`
	}
	wireLateLeave struct {
		LeftAtNs           json.Number `json:"left_at_ns"`
		ForwardedThroughNs json.Number `json:"forwarded_through_ns"`
		Exact              *bool       `json:"exact"`
	}
	wireCommand struct {
		Op         string      `json:"op"`
		AtNs       json.Number `json:"at_ns"`
		Topic      string      `json:"topic"`
		Partitions json.Number `json:"partitions"`
		Partition  json.Number `json:"partition"`
		Offset     json.Number `json:"offset"`
		RequestID  string      `json:"request_id"`
		Changed    bool        `json:"changed"`
		Duplicate  bool        `json:"duplicate"`
	}
)

// decodeChangelog decodes a changelog record's value. It refuses what the
// purge job could not use: not one JSON object, a status other than
// "active" or "left", a left user without left_at_ns (or an active one with
// it), a number that is not an integer in 0..2^64-1, an episode that ends
// before it starts, or a window without "exact".
func decodeChangelog(value []byte) (changelogRecord, error) {
	var w wireChangelog
	dec := json.NewDecoder(bytes.NewReader(value))
	dec.UseNumber()
	if err := dec.Decode(&w); err != nil {
		return changelogRecord{}, fmt.Errorf("not a changelog record: %w", err)
	}
	if dec.More() {
		return changelogRecord{}, fmt.Errorf("trailing data after the changelog record")
	}
	var c changelogRecord
	var err error
	num := func(n json.Number, what string) uint64 {
		u, ok := uintMember(n)
		if !ok && err == nil {
			err = fmt.Errorf("%s %q is not an integer in 0..2^64-1", what, n)
		}
		return u
	}
	c.userID = num(w.UserID, "user_id")
	switch w.Status {
	case "left":
		if w.LeftAtNs == nil {
			return changelogRecord{}, fmt.Errorf("status left without left_at_ns")
		}
		c.left, c.leftAt = true, num(*w.LeftAtNs, "left_at_ns")
	case "active":
		if w.LeftAtNs != nil {
			return changelogRecord{}, fmt.Errorf("status active with left_at_ns %s", *w.LeftAtNs)
		}
	default:
		return changelogRecord{}, fmt.Errorf("status %q is neither active nor left", w.Status)
	}
	for i, e := range w.History {
		ep := episode{leftAt: num(e.LeftAtNs, "history left_at_ns"), rejoinedAt: num(e.RejoinedAtNs, "history rejoined_at_ns")}
		if err == nil && ep.rejoinedAt < ep.leftAt {
			err = fmt.Errorf("history episode %d ends (%d) before it starts (%d)", i, ep.rejoinedAt, ep.leftAt)
		}
		c.history = append(c.history, ep)
	}
	for i, l := range w.LateLeaves {
		if l.Exact == nil && err == nil {
			err = fmt.Errorf("late-leave window %d has no \"exact\"", i)
		}
		win := window{leftAt: num(l.LeftAtNs, "late_leaves left_at_ns"), through: num(l.ForwardedThroughNs, "late_leaves forwarded_through_ns")}
		if l.Exact != nil {
			win.exact = *l.Exact
		}
		c.windows = append(c.windows, win)
	}
	if w.Command != nil {
		c.command = w.Command.Topic + "/" + string(w.Command.Partition) + "/" + string(w.Command.Offset)
		c.order.offset, c.order.ok = num(w.Command.Offset, "command offset"), true
		if w.Command.Partitions != "" { // absent in records of older versions: ordered first
			c.order.partitions = num(w.Command.Partitions, "command partitions")
		}
	}
	if err != nil {
		return changelogRecord{}, err
	}
	return c, nil
}

// sameState reports whether the record states the model's member: status,
// left_at_ns and history, empty episodes included.
func (c changelogRecord) sameState(m *member) bool {
	var want member
	if m != nil {
		want = *m
	}
	if c.left != want.left || (c.left && c.leftAt != want.leftAt) || len(c.history) != len(want.history) {
		return false
	}
	for i, e := range c.history {
		if e != want.history[i] {
			return false
		}
	}
	return true
}

// describeEpisodes renders episodes for a finding: [l,r) closed, [l,∞) open.
func describeEpisodes(eps []episode) string {
	var b bytes.Buffer
	b.WriteByte('[')
	for i, e := range eps {
		if i > 0 {
			b.WriteByte(' ')
		}
		if e.open {
			fmt.Fprintf(&b, "[%d,∞)", e.leftAt)
		} else {
			fmt.Fprintf(&b, "[%d,%d)", e.leftAt, e.rejoinedAt)
		}
	}
	b.WriteByte(']')
	return b.String()
}

// formatUint is strconv.FormatUint in base 10, for keys in findings.
func formatUint(u uint64) string { return strconv.FormatUint(u, 10) }
