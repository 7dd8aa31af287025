package fanout

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/cohortgate/cohortgate/pkg/membership"
	"github.com/cohortgate/cohortgate/topics"
)

// Late-leave windows are not derivable from the commands: they record which
// signals an owner had forwarded when a leave came late. A new owner of a
// partition (after a rebalance, a replacement, a wiped data directory)
// replays the commands into its store, but the windows its predecessors
// recorded are only in the changelog. Once recorded, a window must be in
// every later record of its user (the purge job reads only the latest), so
// before a claim
// applies its first command, a recoverer reads the changelog's records
// of the claim's users and puts their windows into the store, each as soon
// as the store holds the episode it starts.

// windowSource reads what earlier owners wrote to the changelog for the
// users of a signals partition: the changelog (changelogReader), or a
// test's fake. With latest, it also keeps each user's latest restore
// header and says whether the changelog may have lost records, for a
// restore (handover.go).
type windowSource interface {
	read(ctx context.Context, q readRequest) (changelogView, error)
}

// recoveryTimeout bounds one attempt to read the changelog.
const recoveryTimeout = 5 * time.Minute

// recovery is a claim's recovery of the windows its predecessors wrote.
// The commands side owns it.
type recovery struct {
	done bool
	// handedOver says the claim's restore from the changelog was tried
	// (handover.go), and restored that it succeeded.
	handedOver, restored bool
	// pending holds recovered windows not yet in the store, because the
	// episode they belong to has not been replayed yet.
	pending map[uint64][]membership.LateLeave
}

// recoverer recovers windows into the store for the commands side.
type recoverer struct {
	src   windowSource
	store Store
	ev    EventListener
	log   *slog.Logger
	topic topics.Topic // the changelog, for errors
	skip  bool         // Config.Testing.UnsafeNoWindowRecovery
}

// recover recovers the windows of signals partition part into the store
// and rec, retrying until it succeeds or ctx ends: until then the
// partition's commands wait (and with them its signals), which is the
// fail-closed choice.
//
// single and note are those of readRequest.
func (r *recoverer) recover(ctx context.Context, part int32, rec *recovery, single bool, note func(string)) error {
	rec.done = true
	if r.skip {
		r.ev.WindowsRecovered(WindowsRecoveredInfo{Partition: part, Skipped: true})
		return nil
	}
	start := time.Now()
	view, err := r.read(ctx, part, single, note)
	if err != nil || ctx.Err() != nil {
		return err
	}
	return r.attach(part, view, rec, time.Since(start))
}

// recoveryJob is one partition's recovery for recoverAll: the partition,
// its recovery, and single and note as recover takes them.
type recoveryJob struct {
	part   int32
	rec    *recovery
	single bool
	note   func(string)
}

// recoverAll recovers the windows of the jobs whose recovery is not done,
// as recover does, their changelog reads side by side, at most parallel
// at once, then puts each one's windows into the store in the jobs'
// order. Each read goes to the changelog's end read_committed, so it
// waits for the transactions open on it, this processor's own cycle
// among them: one after another, the reads of the partitions of one
// assignment add those waits up (about half a second each, after a
// broker fault moved a coordinator). A job whose read fails is left
// undone, for recover to retry alone.
func (r *recoverer) recoverAll(ctx context.Context, jobs []recoveryJob, parallel int) error {
	var todo []recoveryJob
	for _, j := range jobs {
		if !j.rec.done {
			todo = append(todo, j)
		}
	}
	if len(todo) < 2 || r.skip {
		return nil // recover does one alone
	}
	type result struct {
		view changelogView
		took time.Duration
		err  error
	}
	res := make([]result, len(todo))
	sideBySide(ctx, len(todo), parallel, func(i int) {
		j := todo[i]
		start := time.Now()
		rctx, cancel := context.WithTimeout(ctx, recoveryTimeout)
		defer cancel()
		res[i].view, res[i].err = r.src.read(rctx, readRequest{part: j.part, single: j.single, note: j.note})
		res[i].took = time.Since(start)
	})
	if ctx.Err() != nil {
		return nil
	}
	for i, j := range todo {
		if res[i].err != nil {
			if fatal := notAuthorized("reading "+string(r.topic), res[i].err); fatal != nil {
				return fatal
			}
			continue // recover reads it again, alone, with retries
		}
		j.rec.done = true
		if err := r.attach(j.part, res[i].view, j.rec, res[i].took); err != nil {
			return err
		}
	}
	return nil
}

// sideBySide calls do(0) … do(n-1), each on a goroutine of its own, at
// most parallel (at least 1) at once, and returns when all have returned;
// once ctx ends, those not yet started are not.
func sideBySide(ctx context.Context, n, parallel int, do func(i int)) {
	slots := make(chan struct{}, max(1, parallel))
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				return
			}
			defer func() { <-slots }()
			do(i)
		}()
	}
	wg.Wait()
}

// read reads what earlier owners wrote for signals partition part,
// retrying until it succeeds or ctx ends (then it returns no error and
// an empty view).
func (r *recoverer) read(ctx context.Context, part int32, single bool, note func(string)) (changelogView, error) {
	var (
		view changelogView
		err  error
	)
	for attempt := 1; ; attempt++ {
		rctx, cancel := context.WithTimeout(ctx, recoveryTimeout)
		view, err = r.src.read(rctx, readRequest{part: part, single: single, note: note})
		cancel()
		if err == nil || ctx.Err() != nil {
			break
		}
		if fatal := notAuthorized("reading "+string(r.topic), err); fatal != nil {
			return view, fatal
		}
		r.log.Warn("unable to read late-leave windows from the changelog; the partition's commands wait",
			"partition", part, "attempt", attempt, "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(min(time.Duration(attempt)*time.Second, 30*time.Second)):
		}
	}
	return view, nil
}

// attach puts the windows of view, read for partition part in took,
// into the store and rec, and reports them.
func (r *recoverer) attach(part int32, view changelogView, rec *recovery, took time.Duration) error {
	if err := r.attachAll(view.windows, rec); err != nil {
		return err
	}
	r.ev.WindowsRecovered(WindowsRecoveredInfo{Partition: part, Records: view.stats.records, Windows: view.stats.windows,
		AwaitingReplay: len(rec.pending), Took: took})
	return nil
}

// attachAll puts the windows ws into the store, each whose episode the
// store holds, and the others into rec's pending windows.
func (r *recoverer) attachAll(ws map[uint64][]membership.LateLeave, rec *recovery) error {
	b := r.store.NewBatch()
	defer b.Close()
	rec.pending = make(map[uint64][]membership.LateLeave)
	for user, list := range ws {
		for _, w := range list {
			if err := attach(b, user, w); errors.Is(err, errNoEpisode) {
				rec.pending[user] = append(rec.pending[user], w)
			} else if err != nil {
				return err
			}
		}
	}
	if err := b.Commit(); err != nil {
		return fmt.Errorf("unable to store recovered late-leave windows: %w", err)
	}
	return nil
}

// errNoEpisode is attach's error for a window whose episode the store does
// not hold (yet).
var errNoEpisode = errors.New("fanout: no episode starts at the window")

// attach records w in b if the user's episode that starts at w.LeftAtNs is
// in the store, and returns errNoEpisode otherwise. Windows attach only at
// an episode's exact start: while a replay has not caught up, the user's
// episodes are not yet the ones the window was recorded against.
func attach(b *membership.Batch, user uint64, w membership.LateLeave) error {
	m, err := b.Member(user)
	if err != nil {
		return err
	}
	if _, ok := episodeEnd(m, w.LeftAtNs); !ok {
		return errNoEpisode
	}
	return b.RecordLateLeave(user, w)
}

// attachPending attaches the pending windows of user to b, after a command
// of the user was applied to it.
func (rec *recovery) attachPending(b *membership.Batch, user uint64) error {
	list := rec.pending[user]
	if len(list) == 0 {
		return nil
	}
	kept := list[:0]
	for _, w := range list {
		if err := attach(b, user, w); errors.Is(err, errNoEpisode) {
			kept = append(kept, w)
		} else if err != nil {
			return err
		}
	}
	if len(kept) == 0 {
		delete(rec.pending, user)
	} else {
		rec.pending[user] = kept
	}
	return nil
}
