package membership

import (
	"errors"
	"fmt"
	"math"

	"github.com/cockroachdb/pebble/v2"
)

// Outbox sequence numbers are handed out by nextOutboxSeq, from an in-memory
// counter that Open starts at the largest number the store knows of: the
// larger of the high-water mark under metaOutboxSeqKey and the last entry's
// key. Every batch with entries writes the high-water mark in the same
// commit, so a committed entry's number is never handed out again, even
// after DeleteOutbox removed every entry and the store was reopened.
//
// Batches take their numbers when entries are added but may commit in
// another order. If each wrote the largest number it took, a batch that took
// 5 and committed after one that took 6 would lower the mark to 5, and once
// entry 6 was deleted a reopened store would hand out 6 again. So each batch
// writes the largest number handed out by anyone at the moment it commits,
// and those commits are serialized (commitMu), so that the marks are written
// in non-decreasing order.

// nextOutboxSeq hands out the next outbox sequence number.
func (s *Store) nextOutboxSeq() (uint64, error) {
	for {
		last := s.outbox.last.Load()
		if last == math.MaxUint64 {
			return 0, errInvalidf("outbox sequence numbers exhausted")
		}
		if s.outbox.last.CompareAndSwap(last, last+1) {
			return last + 1, nil
		}
	}
}

// commitOutbox commits pb, which holds outbox entries, with the outbox
// high-water mark.
func (s *Store) commitOutbox(pb *pebble.Batch, noSyncWait bool) error {
	s.outbox.commitMu.Lock()
	defer s.outbox.commitMu.Unlock()
	v := encodeOutboxSeq(s.outbox.last.Load())
	if err := pb.Set(metaOutboxSeqKey, v[:], nil); err != nil {
		return err
	}
	if noSyncWait {
		return s.db.ApplyNoSyncWait(pb, s.writeOpt)
	}
	return pb.Commit(s.writeOpt)
}

// loadOutboxSeq returns the largest outbox sequence number db knows of, or 0.
func loadOutboxSeq(db *pebble.DB) (uint64, error) {
	var mark uint64
	value, closer, err := db.Get(metaOutboxSeqKey)
	switch {
	case err == nil:
		mark, err = decodeOutboxSeq(metaOutboxSeqKey, value)
		closer.Close()
		if err != nil {
			return 0, err
		}
	case errors.Is(err, pebble.ErrNotFound):
	default:
		return 0, fmt.Errorf("unable to read the outbox high-water mark: %w", err)
	}
	it, err := db.NewIter(outboxBounds())
	if err != nil {
		return 0, fmt.Errorf("unable to read the outbox: %w", err)
	}
	var last uint64
	var keyErr error
	if it.Last() {
		last, keyErr = decodeOutboxKey(it.Key())
	}
	if err := it.Close(); err != nil {
		return 0, fmt.Errorf("unable to read the outbox: %w", err)
	}
	if keyErr != nil {
		return 0, keyErr
	}
	return max(mark, last), nil
}

// outboxBounds returns the bounds of a scan of the outbox key space.
func outboxBounds() *pebble.IterOptions {
	return &pebble.IterOptions{LowerBound: []byte{spaceOutbox}, UpperBound: []byte{spaceOutbox + 1}}
}

// Outbox calls fn for every committed outbox entry, in ascending sequence
// order, from one consistent view of the store. value is only valid during
// the call. Outbox stops at the first error of fn, or at a corrupt entry (an
// error wrapping ErrCorrupt that names the key, before fn sees it).
func (s *Store) Outbox(fn func(seq uint64, value []byte) error) (err error) {
	if err := s.usable("read outbox"); err != nil {
		return err
	}
	defer s.guard("read outbox", &err)
	it, err := s.db.NewIter(outboxBounds())
	if err != nil {
		return s.storageErr("read outbox", err)
	}
	for valid := it.First(); valid; valid = it.Next() {
		key := it.Key()
		seq, err := decodeOutboxKey(key)
		var value []byte
		if err == nil {
			value, err = it.ValueAndErr()
		}
		if err == nil {
			err = checkOutboxValue(key, value)
		}
		if err != nil {
			_ = it.Close()
			return s.storageErr("read outbox", err)
		}
		if err := fn(seq, value); err != nil {
			_ = it.Close()
			return fmt.Errorf("membership: outbox stopped at entry %d: %w", seq, err)
		}
	}
	if err := it.Close(); err != nil {
		return s.storageErr("read outbox", err)
	}
	return nil
}

// DeleteOutbox deletes every outbox entry with a sequence number at or
// below through that was committed before the call, with one range delete.
// Entries of batches that commit later stay, whatever their numbers.
//
// The delete is NOT synced, whatever Options.NoSync says: a crash may undo
// it, and then the entries are found by Outbox again and delivered again.
// Delivery from the outbox is at least once anyway; a sync per delivery
// round would buy nothing but latency.
func (s *Store) DeleteOutbox(through uint64) (err error) {
	op := fmt.Sprintf("delete outbox through %d", through)
	if err := s.usable(op); err != nil {
		return err
	}
	if through == 0 {
		return nil // numbers start at 1
	}
	defer s.guard(op, &err)
	end := []byte{spaceOutbox + 1}
	if through < math.MaxUint64 {
		end = appendOutboxKey(nil, through+1)
	}
	if err := s.db.DeleteRange([]byte{spaceOutbox}, end, pebble.NoSync); err != nil {
		return s.storageErr(op, err)
	}
	return nil
}
