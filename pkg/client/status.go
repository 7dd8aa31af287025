package client

import (
	"bytes"
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/topics"
)

// Status returns the user's latest changelog record: the state the
// processor last wrote for the user, with the command it followed. A user
// with no record is active (absent is active): Status returns an active
// record with no history and no Command.
//
// It reads the user's changelog partition (murmur2 of the key, as the
// processor writes it) from its start to its last stable offset, so its
// cost grows with the users of that partition; the topic is compacted, so
// about one record each. For frequent look-ups ask a processor's
// GET /v1/members/{user_id} instead, which answers from its store.
func (c *Client) Status(ctx context.Context, userID uint64) (topics.MemberRecord, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	topic := c.topics.Changelog
	key := topics.AppendUserID(nil, userID)
	latest := topics.MemberRecord{UserID: userID, Status: "active", History: []topics.Episode{}, LateLeaves: []topics.LateLeave{}}
	part, err := c.partitionOf(ctx, topic, key, false)
	if err != nil {
		return latest, fmt.Errorf("client: status of user %d: %w", userID, err)
	}
	start, end, err := c.bounds(ctx, topic, part)
	if err != nil {
		return latest, fmt.Errorf("client: status of user %d: %w", userID, err)
	}
	if end <= start {
		return latest, nil
	}
	rd, err := c.reader(
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{string(topic): {part: kgo.NewOffset().At(start)}}),
		kgo.KeepControlRecords(), // the last offset below the end may be a transaction marker
	)
	if err != nil {
		return latest, fmt.Errorf("client: status of user %d: %w", userID, err)
	}
	defer rd.Close()
	for done := false; !done; {
		fetches := rd.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return latest, fmt.Errorf("client: status of user %d: %s partition %d not read to offset %d: %w", userID, topic, part, end, err)
		}
		if err := fetchErr(fetches); err != nil {
			return latest, fmt.Errorf("client: status of user %d: reading %s partition %d: %w", userID, topic, part, err)
		}
		var decodeErr error
		fetches.EachRecord(func(r *kgo.Record) {
			if done || decodeErr != nil {
				return
			}
			done = r.Offset+1 >= end
			if r.Attrs.IsControl() || !bytes.Equal(r.Key, key) {
				return
			}
			rec, err := topics.DecodeMemberRecord(r.Value)
			if err != nil {
				decodeErr = fmt.Errorf("client: status of user %d: %s partition %d offset %d: %w", userID, topic, part, r.Offset, err)
				return
			}
			latest = rec
		})
		if decodeErr != nil {
			return latest, decodeErr
		}
	}
	return latest, nil
}

// bounds returns a partition's start offset and last stable offset.
func (c *Client) bounds(ctx context.Context, topic topics.Topic, part int32) (start, end int64, err error) {
	adm := kadm.NewClient(c.cl)
	starts, err := adm.ListStartOffsets(ctx, string(topic))
	if err != nil {
		return 0, 0, fmt.Errorf("listing the start offsets of %s: %w", topic, err)
	}
	ends, err := adm.ListCommittedOffsets(ctx, string(topic))
	if err != nil {
		return 0, 0, fmt.Errorf("listing the end offsets of %s: %w", topic, err)
	}
	s, okS := starts.Lookup(string(topic), part)
	e, okE := ends.Lookup(string(topic), part)
	switch {
	case !okS || !okE:
		return 0, 0, fmt.Errorf("no offsets for %s partition %d", topic, part)
	case s.Err != nil:
		return 0, 0, fmt.Errorf("start offset of %s partition %d: %w", topic, part, s.Err)
	case e.Err != nil:
		return 0, 0, fmt.Errorf("end offset of %s partition %d: %w", topic, part, e.Err)
	}
	return s.Offset, e.Offset, nil
}
