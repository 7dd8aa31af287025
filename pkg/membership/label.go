package membership

import (
	"errors"
	"fmt"

	"github.com/cockroachdb/pebble/v2"
)

// Labels are small opaque values the caller keeps beside the state, under
// a name, and writes in the same batch as the state they describe (the
// processor keeps there the layout of the topics its state was built
// under). The package stores them as given. They live in the metadata key
// space, after the prefix "label/", so no label can be mistaken for the
// format stamp or the outbox's sequence number; Forget keeps them.
const (
	labelPrefix = "label/"
	// MaxLabelLen is the largest label value, in bytes.
	MaxLabelLen = 4096
)

// appendLabelKey appends the key of the label name.
func appendLabelKey(dst []byte, name string) []byte {
	dst = append(dst, spaceMeta)
	dst = append(dst, labelPrefix...)
	return append(dst, name...)
}

// validLabel reports why name and value cannot be a label.
func validLabel(name string, value []byte) error {
	if name == "" {
		return errInvalidf("label name is empty")
	}
	if len(value) > MaxLabelLen {
		return errInvalidf("label %q: value of %d bytes, more than %d", name, len(value), MaxLabelLen)
	}
	return nil
}

// Label returns the committed value of the label name, and false if it
// was never set (or was forgotten with SetLabel of nil).
func (s *Store) Label(name string) (value []byte, ok bool, err error) {
	op := fmt.Sprintf("read label %q", name)
	if err := s.usable(op); err != nil {
		return nil, false, err
	}
	if err := validLabel(name, nil); err != nil {
		return nil, false, err
	}
	defer s.guard(op, &err)
	v, closer, err := s.db.Get(appendLabelKey(nil, name))
	if errors.Is(err, pebble.ErrNotFound) {
		return nil, false, nil
	}
	if err != nil {
		return nil, false, s.storageErr(op, err)
	}
	defer closer.Close()
	return append([]byte(nil), v...), true, nil
}

// SetLabel sets the label name to value in the batch, so that it commits
// with the state it describes; a nil value deletes it. value must be at
// most MaxLabelLen bytes; it is copied.
func (b *Batch) SetLabel(name string, value []byte) error {
	if err := b.usable(); err != nil {
		return err
	}
	if err := validLabel(name, value); err != nil {
		return err
	}
	key := appendLabelKey(nil, name)
	var err error
	if value == nil {
		err = b.pb.Delete(key, nil)
	} else {
		err = b.pb.Set(key, value, nil)
	}
	if err != nil {
		return fmt.Errorf("membership: set label %q: %w", name, err)
	}
	return nil
}

// Forget deletes every user's records (state, history, late-leave
// windows, notes and command identities) and every checkpoint, and keeps
// the outbox and the labels, in one write (synced unless Options.NoSync): the store then holds no
// state, as a new one, but what was still to be delivered is still
// delivered. The processor forgets when the state's layout no longer
// holds (the partitions its checkpoints count were changed): the users
// are rebuilt elsewhere, and a checkpoint of the old layout would be
// read as one of the new.
//
// No batch may be open.
func (s *Store) Forget() (err error) {
	const op = "forget every user and checkpoint"
	if err := s.usable(op); err != nil {
		return err
	}
	defer s.guard(op, &err)
	pb := s.db.NewBatch()
	defer pb.Close()
	for _, space := range []byte{spaceUsers, spaceCheckpoints, spaceIdentities} {
		if err := pb.DeleteRange([]byte{space}, []byte{space + 1}, nil); err != nil {
			return s.storageErr(op, err)
		}
	}
	if err := pb.Commit(s.writeOpt); err != nil {
		return s.storageErr(op, err)
	}
	return nil
}
