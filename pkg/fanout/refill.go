package fanout

import (
	"context"
	"fmt"

	"github.com/cohortgate/cohortgate/pkg/membership"
	"github.com/cohortgate/cohortgate/topics"
)

// A changelog deleted and created again holds none of the records the
// purge job needs: each user's status, boundaries, history and late-leave
// windows. Nothing would write a user's record again until the user's
// next command, and a user who never sends one would be lost to the purge
// job for good. So the owner of each partition refills the new changelog
// with the current record of every user of the partition, from its store.
//
// Which partitions: those whose offset metadata names a changelog ID that
// is not the changelog's now (claim.meta carries it). The run that notices
// the new ID starts again (topology.go), and each claim of it reads the
// metadata committed under the old one; a start after the changelog was
// created again while no processor ran reads the same. Metadata that
// names no changelog ("-": an older version's, or one whose changelog was
// not known) asks for no refill.
//
// When: once the partition's store holds every user whose commands were
// judged, that is once the claim is prepared and its commands are applied
// through the judged offset (a replay from offset 0 gets there too). The
// records are made on the commands side, between two of its batches, from
// the store as those batches left it, and go out through the outbox in
// the order of every other record: a record of a later command follows
// them, and so supersedes them in the compacted topic.
//
// Until the refill's records are delivered (the cycle that produced them
// committed), the claim's offset metadata keeps naming the old changelog:
// an owner that takes the partition over after a crash refills it again.
// Once they are, it names the new one, which then holds every user's
// record as the commands' own records would.

// refillBatch bounds how many users one store batch of a refill holds.
const refillBatch = 4096

// refiller is the commands side's part of a refill: it makes the records.
// It runs on the applier's goroutine, between two batches.
type refiller struct {
	cfg        *Config
	store      Store
	claims     *claims
	outbox     *outbox
	kp         keyPartition
	partitions int32 // the commands'
	// hand hands a committed batch of refill records to the applier's
	// syncer, behind the batches committed before it.
	hand func(syncing *membership.Syncing, items []outboxItem) error
}

// due refills the changelog for the claims whose refill is due (see
// refill), all in one read of the store; through is, per claim, the
// offset after the last command the applier applied.
func (a *refiller) due(ctx context.Context, through map[*claim]int64) error {
	byPart := make(map[int32]*claim)
	for _, c := range a.claims.all() {
		r := c.refill
		if r == nil || r.queued || !c.prepared.Load() || max(c.applied.Load(), through[c]) < c.judgedBelow {
			continue
		}
		byPart[c.partition] = c
	}
	if len(byPart) == 0 {
		return nil
	}
	users, last, err := a.fill(ctx, byPart)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("refilling the changelog: %w", err)
	}
	for _, c := range byPart {
		r := c.refill
		r.queued = true
		if users[c] == 0 {
			r.last.Store(refillNone)
		} else {
			r.delivered.Store(&a.outbox.deliveredThrough)
			r.last.Store(last[c])
		}
		a.cfg.Logger.Info("the changelog was created again: refilled with the current record of every user of the partition",
			"topic", string(a.cfg.Topics.Changelog), "partition", c.partition, "old_id", r.from, "users", users[c])
	}
	return nil
}

// fill stores in the outbox, and hands to the syncer, the current
// changelog record of every user of the partitions of byPart; it returns
// how many each claim got, and the sequence number of each one's last.
func (a *refiller) fill(ctx context.Context, byPart map[int32]*claim) (users map[*claim]int, last map[*claim]uint64, err error) {
	users, last = make(map[*claim]int), make(map[*claim]uint64)
	var (
		items  []outboxItem
		owners []*claim // by item
	)
	flush := func() error {
		if len(items) == 0 {
			return nil
		}
		b := a.store.NewBatch()
		defer b.Close()
		for i := range items {
			if len(items[i].e.Headers) == 0 {
				continue
			}
			dump, err := b.AppendDump(items[i].e.Headers[0].Value, userOf(items[i].e.Key))
			if err != nil {
				return err
			}
			items[i].e.Headers[0].Value = dump
		}
		if err := storeOutbox(b, items); err != nil {
			return err
		}
		syncing, err := b.CommitNoSyncWait()
		if err != nil {
			return fmt.Errorf("unable to commit a refill batch: %w", err)
		}
		for i := range items {
			last[owners[i]] = items[i].seq
		}
		handed := items
		items, owners = nil, owners[:0]
		return a.hand(syncing, handed)
	}
	now := a.cfg.Now().UnixNano()
	_, err = a.store.Restore(ctx, func(m membership.Member) error {
		key := topics.AppendUserID(nil, m.UserID)
		c := byPart[a.kp.of(key, a.partitions)]
		if c == nil {
			return nil
		}
		var note topics.Note
		if len(m.Note) > 0 {
			var err error
			if note, err = topics.DecodeNote(m.Note); err != nil {
				return fmt.Errorf("note of user %d: %w", m.UserID, err)
			}
		}
		e := outboxEntry{Topic: string(a.cfg.Topics.Changelog), Partition: -1, Key: key,
			Value: topics.AppendMemberRecord(nil, changelogOf(m, note)), TimestampNs: now}
		if note.Command != nil {
			// The dump is appended in flush, from a batch: the record
			// follows the user's last command, as its own record did.
			e.Headers = []outboxHeader{{Key: topics.HeaderRestore,
				Value: appendRestoreHeader(nil, a.partitions, note.Command.Offset)}}
		}
		items = append(items, outboxItem{owner: &c.revoked, e: e})
		owners = append(owners, c)
		users[c]++
		if len(items) >= refillBatch {
			return flush()
		}
		return nil
	})
	if err == nil {
		err = flush()
	}
	return users, last, err
}

func userOf(key []byte) uint64 {
	u, err := topics.ParseUserID(key)
	if err != nil {
		panic(fmt.Sprintf("fanout: a refill key %q does not parse: %v", key, err)) // made by AppendUserID
	}
	return u
}
