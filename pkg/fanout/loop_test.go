package fanout

import (
	"errors"
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/pkg/membership"
)

// TestRewindOffsets pins where an aborted cycle sends each partition back.
// The case that matters is the second: a partition just taken over from
// another instance, whose committed offset franz-go is still fetching when
// the cycle aborts. Rewinding it to 0 made the new owner forward the
// partition's whole history again (the chaos harness's wipe scenario: 9932
// duplicates in 60000 signals).
func TestRewindOffsets(t *testing.T) {
	none := kgo.EpochOffset{Epoch: -1, Offset: -1}
	at := func(o int64) kgo.EpochOffset { return kgo.EpochOffset{Epoch: 0, Offset: o} }
	for _, tc := range []struct {
		name      string
		start     kgo.EpochOffset // where the lane's consuming began
		committed map[int32]kgo.EpochOffset
		want      map[int32]kgo.EpochOffset
	}{
		{"committed offset known", at(10), map[int32]kgo.EpochOffset{3: at(25)}, map[int32]kgo.EpochOffset{3: at(25)}},
		{"nothing fetched, commit not yet known", none, nil, map[int32]kgo.EpochOffset{}},
		{"no commit, fetched from the log start", at(0), nil, map[int32]kgo.EpochOffset{3: at(0)}},
		{"no commit known, fetched from a later offset", at(4000), nil, map[int32]kgo.EpochOffset{3: at(4000)}},
		{"other partitions' commits ignored", at(7), map[int32]kgo.EpochOffset{1: at(99)}, map[int32]kgo.EpochOffset{3: at(7)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lanes := map[int32]*lane{3: {start: tc.start}}
			got := rewindOffsets(lanes, tc.committed)
			if !maps.Equal(got, tc.want) {
				t.Fatalf("rewindOffsets = %v, want %v", got, tc.want)
			}
		})
	}
}

// failedOutbox is an outbox store whose deletes meet a failed store.
type failedOutbox struct{}

func (failedOutbox) Outbox(func(uint64, []byte) error) error { return nil }

func (failedOutbox) DeleteOutbox(through uint64) error {
	return &membership.StorageError{Dir: "data/membership", Op: fmt.Sprintf("delete outbox through %d", through),
		Err: fmt.Errorf("write data/membership/000004.log: %w", membership.ErrFailed)}
}

// TestDeliveredHaltsOnFailedStore: a store that failed under the delete of
// delivered outbox entries halts the processor with the store's error. It
// was logged as a warning, and the processor went on forwarding, reporting
// ready, over a store that could no longer write, until a command came.
func TestDeliveredHaltsOnFailedStore(t *testing.T) {
	var halted error
	l := &loop{cfg: (&Config{}).EnsureDefaults(), outbox: &outbox{store: failedOutbox{}},
		halt: func(err error) { halted = err }, inflight: []outboxItem{{seq: 7}}}
	l.delivered()
	if !errors.Is(halted, membership.ErrFailed) || !strings.Contains(fmt.Sprint(halted), "data/membership") {
		t.Fatalf("halted with %v, want the store's failure naming its directory", halted)
	}
}
