package fanout

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/pkg/membership"
	"github.com/cohortgate/cohortgate/topics"
)

// The outbox carries records that the commands side makes (changelog
// records, DLQ records of bad commands, misrouted commands to re-publish)
// to the signals side, which produces them inside its next cycle. Every
// record goes through four steps, all in this file:
//
//  1. the commands side makes an outboxItem and stores its entry in the
//     batch of the commands it comes from (storeOutbox), so a crash between
//     applying a command and producing its records loses nothing;
//  2. once the batch committed, it queues the items (outbox.add); at start,
//     the stored entries are queued again (loadOutbox);
//  3. the signals loop takes them into its cycle (outbox.take) and
//     produces them, except a changelog record whose claim is gone
//     (outboxItem.stale), replacing one the broker refused (refusedEntry);
//  4. when the cycle's output is durable the entries are deleted
//     (outbox.delivered); otherwise they are put back (outbox.putBack).
//
// A crash between producing and deleting produces a record again: the
// outbox is at least once (changelog records restate the user's state,
// DLQ records name their source offset, re-published commands are
// duplicates by their identity).

// outboxEntry is one stored record, encoded as JSON (the outbox is off the
// hot path; JSON keeps it inspectable).
type outboxEntry struct {
	Topic string `json:"topic"`
	// Partition is the target partition, or -1 to place the record by
	// key like every other record.
	Partition   int32          `json:"partition"`
	Key         []byte         `json:"key"`
	Value       []byte         `json:"value"`
	Headers     []outboxHeader `json:"headers,omitempty"`
	TimestampNs int64          `json:"ts_ns"`
}

type outboxHeader struct {
	Key   string `json:"k"`
	Value []byte `json:"v"`
}

// errOutboxCorrupt is wrapped by every outbox decoding error.
var errOutboxCorrupt = errors.New("fanout: corrupt outbox entry")

func encodeOutbox(e outboxEntry) []byte {
	b, err := json.Marshal(e)
	if err != nil {
		// Only strings, byte slices and integers: Marshal cannot fail.
		panic(fmt.Sprintf("fanout: encoding outbox entry: %v", err))
	}
	return b
}

func decodeOutbox(b []byte) (outboxEntry, error) {
	var e outboxEntry
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		return e, fmt.Errorf("%w: %v", errOutboxCorrupt, err)
	}
	if dec.More() {
		return e, fmt.Errorf("%w: trailing data", errOutboxCorrupt)
	}
	switch {
	case e.Topic == "":
		return e, fmt.Errorf("%w: no topic", errOutboxCorrupt)
	case e.Partition < -1:
		return e, fmt.Errorf("%w: partition %d", errOutboxCorrupt, e.Partition)
	}
	return e, nil
}

func outboxFrom(r *kgo.Record, partition int32) outboxEntry {
	e := outboxEntry{
		Topic:       r.Topic,
		Partition:   partition,
		Key:         r.Key,
		Value:       r.Value,
		TimestampNs: r.Timestamp.UnixNano(),
	}
	for _, h := range r.Headers {
		e.Headers = append(e.Headers, outboxHeader{h.Key, h.Value})
	}
	return e
}

// outboxItem is an entry and its store sequence number.
type outboxItem struct {
	seq uint64
	e   outboxEntry
	// owner is the revoked flag of the claim whose commands made a
	// changelog entry; nil for the other entries and for every entry
	// loaded from the store at start. A changelog entry is produced only
	// while its claim still owns the partition: once the partition has
	// moved (or the process restarted), the owner re-applies the commands
	// the entry followed and writes the user's record anew, and an older
	// record produced after it would hide it (a compacted topic keeps the
	// last one).
	owner *atomic.Bool
}

// stale reports whether it is a changelog entry whose claim is gone.
func (it outboxItem) stale(changelog topics.Topic) bool {
	return it.e.Topic == string(changelog) && (it.owner == nil || it.owner.Load())
}

func (it outboxItem) record() *kgo.Record {
	r := &kgo.Record{
		Topic:     it.e.Topic,
		Key:       it.e.Key,
		Value:     it.e.Value,
		Timestamp: time.Unix(0, it.e.TimestampNs),
	}
	for _, h := range it.e.Headers {
		r.Headers = append(r.Headers, kgo.RecordHeader{Key: h.Key, Value: h.Value})
	}
	if it.e.Partition >= 0 {
		pin(r, it.e.Partition)
	}
	return r
}

// outboxStore is what the outbox needs of durable storage.
type outboxStore interface {
	Outbox(fn func(seq uint64, value []byte) error) error
	DeleteOutbox(through uint64) error
}

// outbox is the in-memory side of the durable outbox: entries committed
// to the store and not yet produced, in sequence order.
type outbox struct {
	store outboxStore
	mu    struct {
		sync.Mutex
		pending []outboxItem
	}
	stored atomic.Int64 // entries in the store: pending + produced, undelivered
	// deliveredThrough is the highest sequence number delivered: every
	// entry through it was produced in a cycle whose output is durable.
	deliveredThrough atomic.Uint64
}

// add queues entries already committed to the store.
func (o *outbox) add(items ...outboxItem) {
	if len(items) == 0 {
		return
	}
	o.mu.Lock()
	o.mu.pending = append(o.mu.pending, items...)
	o.mu.Unlock()
	o.stored.Add(int64(len(items)))
}

// reset forgets every queued entry, before load queues the stored ones
// again (a new run of the processor).
func (o *outbox) reset() {
	o.mu.Lock()
	o.mu.pending = nil
	o.mu.Unlock()
	o.stored.Store(0)
}

// take removes and returns every pending entry.
func (o *outbox) take() []outboxItem {
	o.mu.Lock()
	defer o.mu.Unlock()
	items := o.mu.pending
	o.mu.pending = nil
	return items
}

// putBack returns entries whose cycle did not commit to the front of the
// queue, keeping sequence order.
func (o *outbox) putBack(items []outboxItem) {
	if len(items) == 0 {
		return
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	o.mu.pending = append(append(make([]outboxItem, 0, len(items)+len(o.mu.pending)), items...), o.mu.pending...)
}

// delivered deletes stored entries through seq.
func (o *outbox) delivered(through uint64) error {
	if err := o.store.DeleteOutbox(through); err != nil {
		return err
	}
	if through > o.deliveredThrough.Load() {
		o.deliveredThrough.Store(through) // only the signals loop delivers
	}
	o.mu.Lock()
	left := int64(len(o.mu.pending))
	o.mu.Unlock()
	o.stored.Store(left)
	return nil
}

// storeOutbox adds the entries of items to b's outbox and sets their
// sequence numbers, to be queued once b commits.
func storeOutbox(b *membership.Batch, items []outboxItem) error {
	for i := range items {
		seq, err := b.AddOutbox(encodeOutbox(items[i].e))
		if err != nil {
			return err
		}
		items[i].seq = seq
	}
	return nil
}

// load queues the entries stored before the last stop, and returns how
// many there are.
func (o *outbox) load() (int, error) {
	var items []outboxItem
	err := o.store.Outbox(func(seq uint64, value []byte) error {
		e, err := decodeOutbox(value)
		if err != nil {
			return fmt.Errorf("outbox entry %d: %w", seq, err)
		}
		items = append(items, outboxItem{seq: seq, e: e})
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("unable to load the outbox: %w", err)
	}
	o.add(items...)
	return len(items), nil
}

// refusedEntry returns what to produce instead of an outbox entry the
// broker refused with err, sized by lim (the topics' limits read since the
// refusal): a changelog record with as much of the user's history as fits
// (see trimChangelog), anything else as a minimal DLQ copy of itself
// naming where it came from. A changelog record that does not fit even
// with no history is an error: it holds the user's boundaries and
// late-leave windows, which the purge job reads from the changelog alone,
// so it is never traded for a DLQ copy (the processor halts, failing
// closed, until the topic takes it).
func refusedEntry(e outboxEntry, set topics.Set, lim limits, err error) (outboxEntry, error) {
	if e.Topic == string(set.Changelog) {
		// Without the restore header, which the next owner takes as a
		// reason to replay (handover.go): the record no longer says all.
		e.Headers = slices.DeleteFunc(slices.Clone(e.Headers), func(h outboxHeader) bool { return h.Key == topics.HeaderRestore })
		budget := lim.of(e.Topic) - batchOverhead - recordOverhead - len(e.Key)
		for _, h := range e.Headers {
			budget -= headerOverhead + len(h.Key) + len(h.Value)
		}
		v, ok := trimChangelog(e.Value, budget)
		if !ok {
			return e, fmt.Errorf("the changelog record of user %s (%d bytes) does not fit %s even without its history "+
				"(max.message.bytes %d; refused with: %v); raise the topic's max.message.bytes: the record holds what the purge job must remove",
				e.Key, len(e.Value), e.Topic, lim.of(e.Topic), err)
		}
		e.Value = v
		if refusalReason(err) == topics.ReasonRecordRefused {
			e.TimestampNs = time.Now().UnixNano() // the topic may refuse the command's timestamp
		}
		return e, nil
	}
	r := outboxItem{e: e}.record()
	// The entry as its own source: the DLQ says what was refused.
	src := &kgo.Record{Topic: r.Topic, Partition: r.Partition, Offset: -1, Key: r.Key, Value: r.Value, Timestamp: r.Timestamp}
	for _, h := range r.Headers {
		switch h.Key {
		case topics.HeaderSourceTopic, topics.HeaderSourcePartition, topics.HeaderSourceOffset:
		default:
			src.Headers = append(src.Headers, h)
		}
	}
	if s, ok := sourceOf(r); ok {
		src.Topic, src.Partition, src.Offset = s.topic, s.partition, s.offset
	}
	return outboxFrom(minimalDeadLetter(set.DLQ, lim.deadLetterBudget(set.DLQ), src, refusalReason(err), err), -1), nil
}
