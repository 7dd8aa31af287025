package fanout

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/pkg/membership"
	"github.com/cohortgate/cohortgate/topics"
)

// flakyOffsets fails its first fails reads of the committed offsets, then
// answers with meta for every partition it holds.
type flakyOffsets struct {
	fails int
	err   error // of the request, or of one partition when partErr
	part  bool
	meta  map[string]map[int32]string
	reads atomic.Int64
}

func (f *flakyOffsets) FetchOffsetsForTopics(_ context.Context, group string, topics ...string) (kadm.OffsetResponses, error) {
	n := f.reads.Add(1)
	out := make(kadm.OffsetResponses)
	for _, t := range topics {
		out[t] = make(map[int32]kadm.OffsetResponse)
		for p, m := range f.meta[t] {
			out[t][p] = kadm.OffsetResponse{Offset: kadm.Offset{Topic: t, Partition: p, At: 50, Metadata: m}}
		}
	}
	if n <= int64(f.fails) {
		if !f.part {
			return nil, f.err
		}
		for t := range out {
			for p, r := range out[t] {
				r.Err = f.err
				out[t][p] = r
			}
		}
	}
	return out, nil
}

func (f *flakyOffsets) ListEndOffsets(context.Context, ...string) (kadm.ListedOffsets, error) {
	return nil, errors.New("not asked for without UnsafeSkipCommands")
}

// TestClaimStartsAtJudgedAfterUnreadableMeta: an instance killed after
// its store committed commands but before their changelog records were
// produced restarts with a checkpoint past them; only the previous
// cycle's judged offset (offset metadata) makes it replay them and write
// the records. A failed read of that metadata used to pass for "none", so
// the claim started at the checkpoint and the records were never written
// (users with no changelog record in a chaos kill run).
func TestClaimStartsAtJudgedAfterUnreadableMeta(t *testing.T) {
	for _, tc := range []struct {
		name  string
		fails int
		err   error
		part  bool
	}{
		{"the request fails twice", 2, errors.New("request timed out"), false},
		{"a partition's read fails twice", 2, kerr.CoordinatorLoadInProgress, true},
		{"no failure", 0, nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &flakyOffsets{fails: tc.fails, err: tc.err, part: tc.part,
				meta: map[string]map[int32]string{string(topics.Defaults().Signals): {3: "1000:25"}}}
			o := newTestOwnership(t, f)
			start := claimOver(t, o, 3, 40)
			if got := start[3].EpochOffset().Offset; got != 25 {
				t.Errorf("commands of partition 3 start at %d, want 25 (the judged offset, below the checkpoint 40)", got)
			}
			c := o.claims.get(3)
			if c == nil {
				t.Fatal("partition 3 not claimed")
			}
			if c.judgedBelow != 25 || c.inheritedMaxNs != 1000 {
				t.Errorf("claim has judgedBelow %d, inheritedMaxNs %d; want 25, 1000", c.judgedBelow, c.inheritedMaxNs)
			}
			if want := int64(tc.fails + 1); f.reads.Load() != want {
				t.Errorf("%d reads of the committed offsets, want %d", f.reads.Load(), want)
			}
		})
	}
}

// TestClaimWithoutMetaStartsAtZero: a partition whose group committed no
// metadata has had no command judged with its changelog records, whatever
// the store applied. The first cycle of a new group aborted by a
// rebalance (INVALID_TXN_STATE) left a leave applied to the store, its
// checkpoint past it, and its changelog record dropped with the revoked
// claim; the instance, given the partition back, started at the
// checkpoint and never wrote the record (TestCommands in cmd/processor:
// no receipt for the leave). Started at 0, it applies the leave again as
// a duplicate and writes the record.
func TestClaimWithoutMetaStartsAtZero(t *testing.T) {
	for _, tc := range []struct {
		name string
		meta map[string]map[int32]string
	}{
		{"no committed offset", nil},
		{"an offset committed without metadata", map[string]map[int32]string{string(topics.Defaults().Signals): {3: ""}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := newTestOwnership(t, &flakyOffsets{meta: tc.meta})
			start := claimOver(t, o, 3, 40)
			if got := start[3].EpochOffset().Offset; got != 0 {
				t.Errorf("commands of partition 3 start at %d, want 0 (nothing judged; the checkpoint is 40)", got)
			}
			if c := o.claims.get(3); c == nil || c.restore || c.floor != 40 {
				t.Errorf("claim %+v: want one that replays (no restore: nothing was judged) over the floor 40", c)
			}
		})
	}
}

// TestClaimWaitsForMetaUntilStopped: while the metadata cannot be read the
// partition stays unclaimed (its signals held); a stop ends the wait.
func TestClaimWaitsForMetaUntilStopped(t *testing.T) {
	f := &flakyOffsets{fails: 1 << 30, err: errors.New("down")}
	o := newTestOwnership(t, f)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan map[int32]int64)
	go func() {
		start := o.claim(ctx, []int32{0})
		out := make(map[int32]int64)
		for p, s := range start {
			out[p] = s.EpochOffset().Offset
		}
		done <- out
	}()
	deadline := time.Now().Add(30 * time.Second)
	for o.claims.get(0) == nil && time.Now().Before(deadline) {
		if f.reads.Load() >= 3 {
			break
		}
		time.Sleep(10 * time.Millisecond) // polling a condition with a deadline
	}
	if o.claims.get(0) != nil {
		t.Fatal("partition claimed without its metadata")
	}
	cancel()
	if start := <-done; len(start) != 0 {
		t.Errorf("claimed %v after the stop", start)
	}
}

// newTestOwnership is an ownership over a store in memory (closed with the
// test) and the default topics, reading the group's offsets from adm.
func newTestOwnership(t *testing.T, adm groupAdmin) *ownership {
	t.Helper()
	store, err := membership.Open("db", &membership.Options{FS: vfs.NewMem(), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	cfg := Config{Brokers: []string{"127.0.0.1:1"}, Logger: slog.New(slog.DiscardHandler)}
	cfg.EnsureDefaults()
	return &ownership{cfg: &cfg, clk: newClock(cfg.Now, cfg.Monotonic), store: store, claims: &claims{}, adm: adm, halt: func(err error) { t.Errorf("halted: %v", err) },
		assignedOnce: new(atomic.Bool)}
}

// claimOver sets the store's commands checkpoint of part to checkpoint and
// claims part, returning where its commands are read from.
func claimOver(t *testing.T, o *ownership, part int32, checkpoint int64) map[int32]kgo.Offset {
	t.Helper()
	b := o.store.(*membership.Store).NewBatch()
	if err := b.SetCheckpoint(string(o.cfg.Topics.Commands), part, checkpoint); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return o.claim(ctx, []int32{part})
}
