package fanout

import "testing"

// TestClaimLate pins when a leave is late. The replay cases are the bug
// the chaos harness found: an owner taking a partition over replays the
// commands from its own (older, or absent) checkpoint, and every leave its
// predecessor had applied in time was reported late against the
// predecessor's decided event time: over a hundred false late-leave
// windows per handover in the changelog, sending the purge job after
// contributions that were never made.
func TestClaimLate(t *testing.T) {
	for _, tc := range []struct {
		name        string
		maxEventNs  int64
		judgedBelow int64
		offset      int64
		left        uint64
		wantLate    bool
	}{
		{"nothing decided yet", -1, 0, 5, 100, false},
		{"boundary after everything decided", 200, 0, 5, 201, false},
		{"boundary at the highest decided event time", 200, 0, 5, 200, true},
		{"boundary before it", 200, 0, 5, 150, true},
		{"replayed: the previous owner applied it", 200, 40, 39, 150, false},
		{"new since the previous owner", 200, 40, 40, 150, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newClaim(0, 0, 0, 8)
			c.maxEventNs.Store(tc.maxEventNs)
			c.judgedBelow = tc.judgedBelow
			seen, late := c.late(tc.offset, tc.left)
			if late != tc.wantLate || (late && seen != uint64(tc.maxEventNs)) {
				t.Fatalf("late(%d, %d) = %d, %v; want late %v", tc.offset, tc.left, seen, late, tc.wantLate)
			}
		})
	}
}

// TestClaimMeta round-trips the offset metadata and reads the older form.
func TestClaimMeta(t *testing.T) {
	c := newClaim(0, 0, 17, 8)
	c.maxEventNs.Store(1764633600000000000)
	c.judgedBelow = 9
	ts, judged, err := parseMeta(c.meta())
	if err != nil || ts != 1764633600000000000 || judged != 17 {
		t.Fatalf("parseMeta(%q) = %d, %d, %v", c.meta(), ts, judged, err)
	}
	c.judgedBelow = 30 // not yet caught up with what the previous owner applied
	if _, judged, _ := parseMeta(c.meta()); judged != 30 {
		t.Fatalf("meta %q: judged %d, want 30", c.meta(), judged)
	}
	for _, tc := range []struct {
		in         string
		ts, judged int64
		wantErr    bool
	}{
		{"1764633600000000000", 1764633600000000000, 0, false},
		{"-1:0", -1, 0, false},
		{"5:x", 0, 0, true},
		{"", 0, 0, true},
	} {
		ts, judged, err := parseMeta(tc.in)
		if (err != nil) != tc.wantErr || ts != tc.ts || judged != tc.judged {
			t.Errorf("parseMeta(%q) = %d, %d, %v", tc.in, ts, judged, err)
		}
	}
}
