package client

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"sync"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/topics"
)

// Status returns the user's latest changelog record: the state the
// processor last wrote for the user, with the command it followed. A user
// with no record is active (absent is active): Status returns an active
// record with no history and no Command.
//
// It reads every changelog partition from its start to its last stable
// offset: the processor may write a user's records into any changelog
// partition when the changelog's partition count differs from, or was
// grown past, the commands'. The user's latest record is the one that
// follows its latest command, the greatest (command.partitions,
// command.offset) — counts only grow, and under one count all of a user's
// commands are in one partition — whichever changelog partition holds it.
// A record that names no command is placed, as a last resort, after the
// record read before it in its own partition. Its cost grows with the
// users of the changelog; the topic is compacted, so about one record
// each. The client's readers for Status are shared by its calls and kept
// between them: at most [Scans] at once, the calls beyond waiting for one
// (within ctx). For frequent look-ups ask the processor that owns the user's
// partition (GET /v1/members/{user_id}), which answers from its store.
func (c *Client) Status(ctx context.Context, userID uint64) (topics.MemberRecord, error) {
	ctx, cancel := bounded(ctx)
	defer cancel()
	topic := c.topics.Changelog
	key := topics.AppendUserID(nil, userID)
	latest := topics.MemberRecord{UserID: userID, Status: "active", History: []topics.Episode{}, LateLeaves: []topics.LateLeave{}}
	bounds, err := c.bounds(ctx, topic)
	if err != nil {
		return latest, fmt.Errorf("client: status of user %d: %w", userID, err)
	}
	from := make(map[int32]kgo.Offset)
	for p, b := range bounds {
		if b.end > b.start {
			from[p] = kgo.NewOffset().At(b.start)
		}
	}
	if len(from) == 0 {
		return latest, nil
	}
	rd, err := c.statusReaders.get(ctx)
	if err != nil {
		return latest, fmt.Errorf("client: status of user %d: %w", userID, err)
	}
	reading := slices.Collect(maps.Keys(from))
	rd.AddConsumePartitions(map[string]map[int32]kgo.Offset{string(topic): from})
	clean := false // read to its end: the reader can serve the next call
	defer func() { c.statusReaders.put(rd, clean, map[string][]int32{string(topic): reading}) }()
	var best recordOrder
	found := false
	last := make(map[int32]recordOrder) // per partition, the order of the user's last record read
	for len(from) > 0 {
		fetches := rd.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return latest, fmt.Errorf("client: status of user %d: %s partitions %v not read to their last stable offsets: %w",
				userID, topic, slices.Sorted(maps.Keys(from)), err)
		}
		if err := fetchErr(fetches); err != nil {
			return latest, fmt.Errorf("client: status of user %d: reading %s: %w", userID, topic, err)
		}
		var decodeErr error
		fetches.EachRecord(func(r *kgo.Record) {
			if _, reading := from[r.Partition]; !reading || decodeErr != nil {
				return
			}
			if r.Offset+1 >= bounds[r.Partition].end {
				delete(from, r.Partition)
			}
			if r.Attrs.IsControl() || !bytes.Equal(r.Key, key) {
				return
			}
			rec, err := topics.DecodeMemberRecord(r.Value)
			if err != nil {
				decodeErr = fmt.Errorf("client: status of user %d: %s partition %d offset %d: %w", userID, topic, r.Partition, r.Offset, err)
				return
			}
			o := orderOf(rec, last[r.Partition])
			last[r.Partition] = o
			if !found || best.compare(o) < 0 {
				best, latest, found = o, rec, true
			}
		})
		if decodeErr != nil {
			return latest, decodeErr
		}
	}
	clean = true
	return latest, nil
}

// readerPool lends [Client.Status] its readers of the changelog: at most
// max at once, kept between calls, each made at the first call that finds
// none idle. A reader is lent with nothing to consume; the borrower adds
// the partitions it reads and gives them back with it. A reader whose
// read did not end cleanly (a deadline, an error) is closed, not kept.
type readerPool struct {
	c     *Client
	lends chan struct{} // a token per reader lent; its capacity is max

	mu     sync.Mutex
	idle   []*kgo.Client
	made   int
	closed bool
}

func newReaderPool(c *Client, max int) *readerPool {
	return &readerPool{c: c, lends: make(chan struct{}, max)}
}

// get lends a reader, waiting for one to be free until ctx ends.
func (p *readerPool) get(ctx context.Context) (*kgo.Client, error) {
	select {
	case p.lends <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for one of the client's %d readers: %w", cap(p.lends), context.Cause(ctx))
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		<-p.lends
		return nil, fmt.Errorf("the client is closed")
	}
	if n := len(p.idle); n > 0 {
		rd := p.idle[n-1]
		p.idle = p.idle[:n-1]
		p.mu.Unlock()
		return rd, nil
	}
	p.made++
	role := "status-" + strconv.Itoa(p.made)
	p.mu.Unlock()
	// KeepControlRecords: the last offset below the end may be a
	// transaction marker, which Status must see to know it is done.
	rd, err := p.c.reader(role, kgo.KeepControlRecords())
	if err != nil {
		<-p.lends
		return nil, err
	}
	return rd, nil
}

// put takes rd back, which consumed read: kept for the next call when
// clean, closed otherwise or once the client is closed.
func (p *readerPool) put(rd *kgo.Client, clean bool, read map[string][]int32) {
	defer func() { <-p.lends }()
	if clean {
		rd.RemoveConsumePartitions(read) // drops what it fetched beyond the end
		p.mu.Lock()
		if !p.closed {
			p.idle = append(p.idle, rd)
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
	}
	rd.Close()
}

// close closes the idle readers; one lent is closed when it comes back.
func (p *readerPool) close() {
	p.mu.Lock()
	idle := p.idle
	p.idle, p.closed = nil, true
	p.mu.Unlock()
	for _, rd := range idle {
		rd.Close()
	}
}

// recordOrder is where a changelog record stands among its user's
// records: the commands partition count and offset of the command it
// follows, then, for records that follow none, how many such records came
// after the last one that did in the same changelog partition.
type recordOrder struct {
	parts  int32
	offset int64
	after  int
}

// orderOf is rec's order, given prev, the order of the record of the same
// user read before it in its changelog partition (zero if none). A record
// of an older version names no count (0): it precedes every record that
// does.
func orderOf(rec topics.MemberRecord, prev recordOrder) recordOrder {
	if rec.Command == nil {
		prev.after++
		return prev
	}
	return recordOrder{parts: rec.Command.Partitions, offset: rec.Command.Offset}
}

func (o recordOrder) compare(p recordOrder) int {
	if c := cmp.Compare(o.parts, p.parts); c != 0 {
		return c
	}
	if c := cmp.Compare(o.offset, p.offset); c != 0 {
		return c
	}
	return cmp.Compare(o.after, p.after)
}

// span is a partition's start offset and last stable offset.
type span struct{ start, end int64 }

// bounds returns every partition of topic with its start offset and last
// stable offset.
func (c *Client) bounds(ctx context.Context, topic topics.Topic) (map[int32]span, error) {
	adm := kadm.NewClient(c.cl)
	starts, err := adm.ListStartOffsets(ctx, string(topic))
	if err != nil {
		return nil, fmt.Errorf("listing the start offsets of %s: %w", topic, err)
	}
	ends, err := adm.ListCommittedOffsets(ctx, string(topic))
	if err != nil {
		return nil, fmt.Errorf("listing the end offsets of %s: %w", topic, err)
	}
	out := make(map[int32]span)
	var errs []error
	ends.Each(func(e kadm.ListedOffset) {
		s, ok := starts.Lookup(string(topic), e.Partition)
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("no start offset for %s partition %d", topic, e.Partition))
		case s.Err != nil:
			errs = append(errs, fmt.Errorf("start offset of %s partition %d: %w", topic, e.Partition, s.Err))
		case e.Err != nil:
			errs = append(errs, fmt.Errorf("end offset of %s partition %d: %w", topic, e.Partition, e.Err))
		default:
			out[e.Partition] = span{start: s.Offset, end: e.Offset}
		}
	})
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("topic %s has no partitions (does it exist? the processor creates it at start)", topic)
	}
	return out, nil
}
