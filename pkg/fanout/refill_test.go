package fanout

import (
	"context"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/cohortgate/cohortgate/pkg/membership"
	"github.com/cohortgate/cohortgate/topics"
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

// TestRefillerWritesOwnedUsers: a due refill writes the current record of
// every user of the claim's partition (and of no other), with a restore
// header that follows the user's last command and decodes; the claim's
// metadata names the new changelog once they are delivered.
func TestRefillerWritesOwnedUsers(t *testing.T) {
	store, err := membership.Open("db", &membership.Options{FS: vfs.NewMem(), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	const parts = 2
	kp := newKeyPartition()
	b := store.NewBatch()
	want := make(map[uint64]bool)
	for u := uint64(1); u <= 20; u++ {
		if _, err := b.Leave(u, 100*u); err != nil {
			t.Fatal(err)
		}
		note := topics.Note{Command: &topics.CommandRef{Op: "leave", Offset: int64(u), Partitions: parts}}
		if err := b.SetNote(u, topics.AppendNote(nil, note)); err != nil {
			t.Fatal(err)
		}
		if kp.of(topics.AppendUserID(nil, u), parts) == 1 {
			want[u] = true
		}
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	b.Close()

	cfg := Config{Topics: topics.Set{Changelog: "cl"}, Logger: slog.New(slog.DiscardHandler), Now: time.Now}
	var cs claims
	c := newClaim(1, 1, 0, 0)
	c.refill = &refill{from: "old", to: "new", toParts: 3}
	cs.put(c)
	ob := &outbox{store: store}
	r := &refiller{cfg: &cfg, store: store, claims: &cs, outbox: ob, kp: kp, partitions: parts,
		hand: func(s *membership.Syncing, items []outboxItem) error {
			if err := s.Wait(); err != nil {
				return err
			}
			ob.add(items...)
			return nil
		}}
	if err := r.due(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	items := ob.take()
	if len(items) != len(want) {
		t.Fatalf("%d records, want %d (the users of partition 1)", len(items), len(want))
	}
	for _, it := range items {
		u, err := topics.ParseUserID(it.e.Key)
		if err != nil || !want[u] || it.e.Topic != "cl" || it.owner != &c.revoked {
			t.Fatalf("record %+v: user %d of partition 1? %v", it.e, u, want[u])
		}
		rec, err := topics.DecodeMemberRecord(it.e.Value)
		if err != nil || rec.Status != "left" || rec.LeftAtNs == nil || *rec.LeftAtNs != 100*u {
			t.Errorf("user %d: record %+v, %v", u, rec, err)
		}
		follows, _, err := parseRestoreHeader(it.e.Headers[0].Value)
		if err != nil || follows.offset != int64(u) || follows.parts != parts {
			t.Errorf("user %d: restore header follows %+v, %v; want offset %d", u, follows, err, u)
		}
	}
	if id, _ := c.changelogMeta(); id != "old" {
		t.Errorf("before delivery the metadata names %q, want old", id)
	}
	if err := ob.delivered(items[len(items)-1].seq); err != nil {
		t.Fatal(err)
	}
	if id, parts := c.changelogMeta(); id != "new" || parts != 3 {
		t.Errorf("after delivery the metadata names %q, %d; want new, 3", id, parts)
	}
	if err := r.due(context.Background(), nil); err != nil || len(ob.take()) != 0 {
		t.Errorf("a refill done was done again: %v", err)
	}
}
