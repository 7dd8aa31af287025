package fanout

import (
	"context"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/cohortgate/cohortgate/pkg/membership"
)

// Store is what the processor needs of durable membership state. A
// *membership.Store satisfies it.
type Store interface {
	NewBatch() *membership.Batch
	NewImport() *membership.Import
	Checkpoint(topic string, partition int32) (next int64, ok bool, err error)
	Checkpoints(topic string) (map[int32]int64, error)
	Restore(ctx context.Context, fn func(membership.Member) error) (membership.RestoreStats, error)
	Member(userID uint64) (membership.Member, error)
	Label(name string) (value []byte, ok bool, err error)
	Forget() error
	Outbox(fn func(seq uint64, value []byte) error) error
	DeleteOutbox(through uint64) error
	// Failed is closed once the store has failed, Err says how: a failure
	// in one of Pebble's background jobs is met by no call until the next
	// one, and the processor halts at once instead of forwarding over a
	// store that can no longer write.
	Failed() <-chan struct{}
	Err() error
	// FS and TempDir are where a restore spills what it cannot hold.
	FS() vfs.FS
	TempDir() string
}

var _ Store = (*membership.Store)(nil)
