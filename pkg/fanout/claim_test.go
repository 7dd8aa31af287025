package fanout

import (
	"reflect"
	"strings"
	"testing"

	"github.com/cohortgate/cohortgate/pkg/membership"
)

// TestClaimLateWindow pins when a leave is late and what window it gets.
// The replay cases are the bug the chaos harness found: an owner taking a
// partition over replays the commands from its own (older, or absent)
// checkpoint, and every leave its predecessor had applied in time was
// reported late against the predecessor's decided event time: over a
// hundred false late-leave windows per handover in the changelog, sending
// the purge job after contributions that were never made. The exact cases
// are the purge job's: a window names a forwarded signal of the user, or there
// is none.
func TestClaimLateWindow(t *testing.T) {
	const open = membership.OpenEnd
	exact := func(latest int64) fwdResult { return fwdResult{latest: latest, found: true, complete: true} }
	none := fwdResult{complete: true}
	unknown := fwdResult{}
	for _, tc := range []struct {
		name        string
		maxEventNs  int64
		inherited   int64
		judgedBelow int64
		offset      int64
		left, end   uint64
		fwd         fwdResult
		want        membership.LateLeave // zero: no window
	}{
		{"nothing decided yet", -1, -1, 0, 5, 100, open, none, membership.LateLeave{}},
		{"nothing of the user forwarded", 200, -1, 0, 5, 150, open, none, membership.LateLeave{}},
		{"the user's latest forwarded signal", 200, -1, 0, 5, 150, open, exact(170), membership.LateLeave{LeftAtNs: 150, ForwardedThroughNs: 170, Exact: true}},
		{"replayed: the previous owner applied it", 200, 190, 40, 39, 150, open, exact(170), membership.LateLeave{}},
		{"an empty episode holds nothing", 200, -1, 0, 5, 150, 150, exact(170), membership.LateLeave{}},
		{"a previous owner decided after the boundary", 200, 180, 40, 40, 150, open, exact(170),
			membership.LateLeave{LeftAtNs: 150, ForwardedThroughNs: 200}},
		{"the record does not reach back", 200, -1, 0, 5, 150, open, unknown, membership.LateLeave{LeftAtNs: 150, ForwardedThroughNs: 200}},
		{"bounded by the episode's end", 200, 180, 0, 5, 150, 160, unknown, membership.LateLeave{LeftAtNs: 150, ForwardedThroughNs: 159}},
		{"boundary after everything decided, unknown record", 200, 180, 0, 5, 201, open, unknown, membership.LateLeave{}},
		{"boundary after what previous owners decided", 200, 149, 0, 5, 150, open, exact(151), membership.LateLeave{LeftAtNs: 150, ForwardedThroughNs: 151, Exact: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClaim(0, 1, 0, 0)
			c.maxEventNs.Store(tc.maxEventNs)
			c.inheritedMaxNs = tc.inherited
			c.judgedBelow = tc.judgedBelow
			got, ok := c.lateWindow(tc.offset, tc.left, tc.end, tc.fwd)
			if ok != (tc.want != membership.LateLeave{}) || got != tc.want {
				t.Fatalf("lateWindow(%d, %d, %d, %+v) = %+v, %v; want %+v", tc.offset, tc.left, tc.end, tc.fwd, got, ok, tc.want)
			}
		})
	}
}

// TestClaimMeta round-trips the offset metadata and reads the older forms.
func TestClaimMeta(t *testing.T) {
	c := newClaim(0, 1, 0, 17)
	c.maxEventNs.Store(1764633600000000000)
	c.judgedBelow = 9
	c.changelogID, c.changelogParts = "0a1b", 6
	c.commandsID, c.layoutParts, c.inheritedParts = "c/+=", 12, 6
	want := offsetMeta{eventNs: 1764633600000000000, judged: 17, changelogID: "0a1b", changelogParts: 6,
		commandsID: "c/+=", commandsParts: 12}
	if m, err := parseMeta(c.meta(17)); err != nil || !reflect.DeepEqual(m, want) {
		t.Fatalf("parseMeta(%q) = %+v, %v; want %+v", c.meta(17), m, err, want)
	}
	c.inputIDs = []string{"AAAAAAAA", "-"}
	want.inputs = c.inputIDs
	if m, err := parseMeta(c.meta(17)); err != nil || !reflect.DeepEqual(m, want) {
		t.Fatalf("with the inputs' IDs: parseMeta(%q) = %+v, %v; want %+v", c.meta(17), m, err, want)
	}
	c.judgedBelow = 30 // not yet caught up with what the previous owner applied
	if m, _ := parseMeta(c.meta(17)); m.judged != 30 {
		t.Fatalf("meta %q: judged %d, want 30", c.meta(17), m.judged)
	}
	// Claimed under a new count with its commands read to 40 under the old
	// one: the metadata names the old count until they are read again.
	c.tailEnd = 40
	if m, _ := parseMeta(c.meta(39)); m.commandsParts != 6 {
		t.Errorf("judged 39 of a tail to 40: commands count %d, want the inherited 6", m.commandsParts)
	}
	if m, _ := parseMeta(c.meta(40)); m.commandsParts != 12 {
		t.Errorf("judged 40 of a tail to 40: commands count %d, want 12", m.commandsParts)
	}
	c.changelogParts = 0
	if s := c.meta(40); !strings.Contains(s, ":*:") {
		t.Errorf("meta %q of a changelog whose count changed: want * for its count", s)
	}
	for _, tc := range []struct {
		in      string
		want    offsetMeta
		wantErr bool
	}{
		{"1764633600000000000", offsetMeta{eventNs: 1764633600000000000, changelogID: noChangelogID, legacy: true}, false},
		{"-1:0", offsetMeta{eventNs: -1, changelogID: noChangelogID, legacy: true}, false},
		{"-1:7:", offsetMeta{eventNs: -1, judged: 7, changelogID: noChangelogID, legacy: true}, false},
		{"-1:7:-", offsetMeta{eventNs: -1, judged: 7, changelogID: noChangelogID, legacy: true}, false},
		{"-1:7:0a1b", offsetMeta{eventNs: -1, judged: 7, changelogID: "0a1b", legacy: true}, false},
		{"-1:7:0a1b:*:-:0", offsetMeta{eventNs: -1, judged: 7, changelogID: "0a1b"}, false},
		{"-1:7:0a1b:3:xy:4", offsetMeta{eventNs: -1, judged: 7, changelogID: "0a1b", changelogParts: 3, commandsID: "xy", commandsParts: 4}, false},
		{"-1:7:0a1b:3:xy:4:AAAAAAAA,-", offsetMeta{eventNs: -1, judged: 7, changelogID: "0a1b", changelogParts: 3, commandsID: "xy", commandsParts: 4,
			inputs: []string{"AAAAAAAA", "-"}}, false},
		{"-1:7:0a1b:q:xy:4", offsetMeta{}, true},
		{"-1:7:0a1b:3:xy:-4", offsetMeta{}, true},
		{"5:x", offsetMeta{}, true},
		{"", offsetMeta{}, true},
	} {
		m, err := parseMeta(tc.in)
		if (err != nil) != tc.wantErr || !reflect.DeepEqual(m, tc.want) {
			t.Errorf("parseMeta(%q) = %+v, %v; want %+v", tc.in, m, err, tc.want)
		}
	}
}
