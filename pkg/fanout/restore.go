package fanout

import (
	"context"
	"fmt"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/cohortgate/cohortgate/pkg/gate"
	"github.com/cohortgate/cohortgate/pkg/membership"
)

// restoreChunk is how many members the store scan hands to the gate
// inserts at a time: enough that the hand-over costs nothing per member,
// few enough that the two sides overlap from the first moment.
const restoreChunk = 4096

// restoreBatches is how many batches circulate between the two sides: one
// being filled, one being inserted and one waiting, so that neither side
// waits for the other while both keep pace.
const restoreBatches = 3

// restoreBatch carries the episodes of up to restoreChunk members from the
// store scan to the gate inserts. users[i]'s episodes are eps[ends[i-1]:ends[i]]
// (from 0 for i == 0). A batch is reused once inserted, so a restore
// allocates nothing per member.
type restoreBatch struct {
	users []uint64
	ends  []int
	eps   []gate.Episode
}

// restoreGate rebuilds g from store before anything is consumed. Reading
// and decoding the store and inserting into the gate each take about half
// of a restore on one core (the inserts are a cache miss each at millions
// of members), so they run side by side: the scan in one goroutine, the
// inserts in another, joined by restoreBatches reused batches. Both exit
// before restoreGate returns, also on error.
//
// With a snapshot configured, it first tries to load the gate from it; the
// scan runs only when that fails, and the info says why.
//
// A snapshot older than the store is used when rg is not nil: rg then
// holds the partitions whose commands must be applied again (see regate).
func restoreGate(ctx context.Context, store Store, g *gate.Map, snap gateSnapshot, rg *regate) (RestoredInfo, error) {
	start := time.Now()
	var fallback error
	if rg != nil {
		rg.set(nil, nil) // a scan owes nothing
	}
	if snap.path != "" {
		behind, cps, err := snap.load(store, g, rg != nil)
		if fallback = err; err == nil {
			if rg != nil {
				rg.set(behind, cps)
			}
			return RestoredInfo{Members: g.Len(), Took: time.Since(start), Source: "snapshot", Regate: regateOf(behind, cps)}, nil
		}
	}
	eg, gctx := errgroup.WithContext(ctx)
	full := make(chan *restoreBatch, restoreBatches)
	free := make(chan *restoreBatch, restoreBatches)
	for range restoreBatches {
		free <- &restoreBatch{}
	}
	var st membership.RestoreStats
	eg.Go(func() error {
		defer close(full)
		var err error
		st, err = scanStore(gctx, store, full, free)
		return err
	})
	eg.Go(func() error { return insertRestored(g, full, free) })
	if err := eg.Wait(); err != nil {
		return RestoredInfo{}, fmt.Errorf("unable to restore the gate from the store: %w", err)
	}
	return RestoredInfo{Members: st.Members, Episodes: st.Episodes, Took: time.Since(start), Scan: st.Duration,
		Source: "scan", Fallback: fallback}, nil
}

// scanStore reads every member of the store into batches taken from free
// and sends them, filled, to full. Users with only a note are skipped:
// absent from the gate is Active.
func scanStore(ctx context.Context, store Store, full chan<- *restoreBatch, free <-chan *restoreBatch) (membership.RestoreStats, error) {
	b := <-free // free holds restoreBatches batches and no one else has taken one
	send := func() error {
		select {
		case full <- b:
		case <-ctx.Done():
			return ctx.Err()
		}
		select {
		case b = <-free:
		case <-ctx.Done():
			return ctx.Err()
		}
		b.users, b.ends, b.eps = b.users[:0], b.ends[:0], b.eps[:0]
		return nil
	}
	var eps []membership.Episode
	st, err := store.Restore(ctx, func(m membership.Member) error {
		eps = m.Episodes(eps[:0])
		if len(eps) == 0 {
			return nil
		}
		b.users = append(b.users, m.UserID)
		b.eps = gateEpisodes(b.eps, eps)
		b.ends = append(b.ends, len(b.eps))
		if len(b.users) == restoreChunk {
			return send()
		}
		return nil
	})
	if err == nil && len(b.users) > 0 {
		err = send()
	}
	return st, err
}

// insertRestored sets each member of each batch from full in the gate and
// returns the batch to free, until full is closed. Sending to free never
// blocks: it has room for every batch there is.
func insertRestored(g *gate.Map, full <-chan *restoreBatch, free chan<- *restoreBatch) error {
	for b := range full {
		from := 0
		for i, u := range b.users {
			if err := g.Set(u, b.eps[from:b.ends[i]]); err != nil {
				return err
			}
			from = b.ends[i]
		}
		free <- b
	}
	return nil
}

// regateOf is how many commands each partition behind applies again at
// most, for RestoredInfo.
func regateOf(behind, cps map[int32]int64) map[int32]int64 {
	if len(behind) == 0 {
		return nil
	}
	out := make(map[int32]int64, len(behind))
	for p, from := range behind {
		out[p] = cps[p] - from
	}
	return out
}
