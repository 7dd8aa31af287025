package fanout

import (
	"sync/atomic"
	"testing"
)

// TestChangelogMetaFollowsRefill: the offset metadata names the deleted
// changelog until the refill's records are delivered, so that a next
// owner refills again after a crash, and the new one after.
func TestChangelogMetaFollowsRefill(t *testing.T) {
	var delivered atomic.Uint64
	c := newClaim(0, 1, 0, 0)
	c.changelogID, c.changelogParts = noChangelogID, 0
	if id, _ := c.changelogMeta(); id != noChangelogID {
		t.Fatalf("without a refill: %q", id)
	}
	c.refill = &refill{from: "old", to: "new", toParts: 3}
	for _, tc := range []struct {
		name      string
		last      uint64
		delivered uint64
		wantID    string
		wantParts int32
	}{
		{"not stored yet", 0, 0, "old", 0},
		{"stored, not delivered", 7, 6, "old", 0},
		{"delivered", 7, 7, "new", 3},
		{"delivered past it", 7, 9, "new", 3},
		{"no user to refill", refillNone, 0, "new", 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			delivered.Store(tc.delivered)
			c.refill.delivered.Store(&delivered)
			c.refill.last.Store(tc.last)
			id, parts := c.changelogMeta()
			if id != tc.wantID || parts != tc.wantParts {
				t.Errorf("changelogMeta = %q, %d; want %q, %d", id, parts, tc.wantID, tc.wantParts)
			}
			m, err := parseMeta(c.meta(0))
			if err != nil || m.changelogID != tc.wantID {
				t.Errorf("meta %q names %q (%v); want %q", c.meta(0), m.changelogID, err, tc.wantID)
			}
		})
	}
}
