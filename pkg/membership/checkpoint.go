package membership

import (
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// validCheckpoint reports why (topic, partition) cannot name a checkpoint.
func validCheckpoint(topic string, partition int32) error {
	if err := validTopic(topic); err != nil {
		return err
	}
	if partition < 0 {
		return errInvalidf("topic %q: partition %d is negative", topic, partition)
	}
	return nil
}

// Checkpoint returns the committed next offset to read of (topic,
// partition), and false if none was ever set.
func (s *Store) Checkpoint(topic string, partition int32) (next int64, ok bool, err error) {
	op := fmt.Sprintf("read checkpoint %s/%d", topic, partition)
	if err := s.usable(op); err != nil {
		return 0, false, err
	}
	if err := validCheckpoint(topic, partition); err != nil {
		return 0, false, err
	}
	defer s.guard(op, &err)
	var buf [64]byte
	key := appendCheckpointKey(buf[:0], topic, partition)
	value, closer, err := s.db.Get(key)
	if errors.Is(err, pebble.ErrNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, s.storageErr(op, err)
	}
	defer closer.Close()
	next, err = decodeCheckpointValue(key, value)
	if err != nil {
		return 0, false, s.storageErr(op, err)
	}
	return next, true, nil
}

// Checkpoints returns the committed next offsets of every partition of topic
// that has one. The map is empty, not nil, if there are none.
func (s *Store) Checkpoints(topic string) (_ map[int32]int64, err error) {
	op := fmt.Sprintf("read checkpoints of %q", topic)
	if err := s.usable(op); err != nil {
		return nil, err
	}
	if err := validTopic(topic); err != nil {
		return nil, err
	}
	defer s.guard(op, &err)
	lower := appendCheckpointPrefix(nil, topic)
	// Every key of the topic sorts before its prefix with the terminator
	// raised by one.
	upper := append([]byte{spaceCheckpoints}, topic...)
	upper = append(upper, topicTerminator+1)
	it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return nil, s.storageErr(op, err)
	}
	out := make(map[int32]int64)
	for valid := it.First(); valid; valid = it.Next() {
		key := it.Key()
		t, p, err := decodeCheckpointKey(key)
		if err == nil && t != topic {
			err = corruptf(key, "checkpoint of topic %q under the prefix of %q", t, topic)
		}
		var value []byte
		if err == nil {
			value, err = it.ValueAndErr()
		}
		var next int64
		if err == nil {
			next, err = decodeCheckpointValue(key, value)
		}
		if err != nil {
			_ = it.Close()
			return nil, s.storageErr(op, err)
		}
		out[p] = next
	}
	if err := it.Close(); err != nil {
		return nil, s.storageErr(op, err)
	}
	return out, nil
}
