package fanout

import (
	"bytes"
	"cmp"
	"container/heap"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

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

// readRequest is what a windowSource is asked to read.
type readRequest struct {
	part   int32 // the signals partition whose users' records are read
	latest bool  // keep the latest restore header of each user, for a restore
	// single says that every record of the partition's users is in the
	// changelog partition their key gives under its present count (it
	// never changed, as the claim's offset metadata says): only that one
	// is read when the changelog has as many partitions as the commands.
	single bool
	// note says, for /v1/partitions, what the read waits for ("" once it
	// no longer waits); nil when nobody listens.
	note func(string)
	// progress, if not nil, is told how far the read is.
	progress *restoreProgress
}

type recoveryStats struct{ records, windows int }

// changelogView is what a windowSource read.
type changelogView struct {
	windows map[uint64][]membership.LateLeave
	stats   recoveryStats
	// With latest only:
	//
	// restore holds the restore header of every record read, in the
	// order read, for a restore to take each user's latest.
	restore *restoreHeaders
	// lossy says why records may be missing from the changelog (a policy
	// that deletes, records deleted below a partition's start), or nil.
	lossy error

	byUser map[uint64]map[uint64]membership.LateLeave // while adding
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
	skip  bool         // Config.UnsafeNoWindowRecovery
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
			return fatal
		}
		r.log.Warn("unable to read late-leave windows from the changelog; the partition's commands wait",
			"partition", part, "attempt", attempt, "err", err)
		select {
		case <-ctx.Done():
		case <-time.After(min(time.Duration(attempt)*time.Second, 30*time.Second)):
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	if err := r.attachAll(view.windows, rec); err != nil {
		return err
	}
	r.ev.WindowsRecovered(WindowsRecoveredInfo{Partition: part, Records: view.stats.records, Windows: view.stats.windows,
		AwaitingReplay: len(rec.pending), Took: time.Since(start)})
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

// episodeEnd returns the end of m's episode that starts at left
// (membership.OpenEnd for the open one), and false when none does.
func episodeEnd(m membership.Member, left uint64) (uint64, bool) {
	if m.Status == membership.Left && m.LeftAtNs == left {
		return membership.OpenEnd, true
	}
	for _, e := range m.History {
		if e.LeftAtNs == left {
			return e.RejoinedAtNs, true
		}
	}
	return 0, false
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

// changelogReader is the windowSource of a running processor: it reads the
// changelog with one client made at start (a Kafka client made mid-run
// would share the metrics hooks with running ones), adding and removing
// the partitions it reads. Only the commands side uses it.
type changelogReader struct {
	// clients are the reader clients not in use: a read or a leavers
	// check takes one for its duration, so that restores side by side
	// each fetch (and decompress, on the client's goroutine) on their own.
	clients             chan *readerClient
	adm                 *kadm.Client
	topic               string
	signalPartitions    int32
	changelogPartitions int32
	log                 *slog.Logger
}

// read reads the changelog, read_committed, up to its high watermarks as
// they are when it starts, and returns the late-leave windows of the
// users of signals partition q.part, merged per leave: the latest
// forwarded_through, exact only if every record said so. Every record of
// a user counts, not only the latest: a record written by an owner that
// had not recovered a window must not hide it. With q.latest, it also
// keeps each user's latest restore header, and checks that the changelog
// keeps every user's latest record: its cleanup.policy is compact alone,
// and no partition read starts above offset 0.
//
// The high watermark, not the last stable offset: the records a previous
// owner committed with its offset metadata may still be above the last
// stable offset when a new owner reads (the transaction's markers reach
// the changelog's partitions after the group's offsets commit, and
// another transaction left open holds them), and a read that stopped
// there would restore without them. The read waits until each partition's
// last stable offset passes the end it started with, and says so
// (q.note, and a warning every ten seconds).
func (cr *changelogReader) read(ctx context.Context, q readRequest) (_ changelogView, err error) {
	var v changelogView
	defer func() {
		if err != nil {
			v.done() // the restore that would have called it drops v
		}
	}()
	note := q.note
	if note == nil {
		note = func(string) {}
	}
	defer note("")
	topic := cr.topic
	parts := []int32{q.part}
	if !q.single || cr.changelogPartitions != cr.signalPartitions {
		parts = parts[:0]
		for i := range cr.changelogPartitions {
			parts = append(parts, i)
		}
	}
	if q.latest {
		policy, err := cr.cleanupPolicy(ctx)
		if err != nil {
			return v, err
		}
		if policy != "compact" {
			v.lossy = fmt.Errorf("the changelog's cleanup.policy is %q, not compact: records may have been deleted", policy)
		}
	}
	starts, err := cr.adm.ListStartOffsets(ctx, topic)
	if err != nil {
		return v, fmt.Errorf("listing the changelog's start offsets: %w", err)
	}
	ends, err := cr.adm.ListEndOffsets(ctx, topic)
	if err != nil {
		return v, fmt.Errorf("listing the changelog's end offsets: %w", err)
	}
	stable, err := cr.adm.ListCommittedOffsets(ctx, topic)
	if err != nil {
		return v, fmt.Errorf("listing the changelog's last stable offsets: %w", err)
	}
	want := make(map[int32]int64) // partition → end still to reach
	from := make(map[int32]kgo.Offset)
	startOf := make(map[int32]int64)
	for _, p := range parts {
		s, okS := starts.Lookup(topic, p)
		e, okE := ends.Lookup(topic, p)
		if !okS || !okE || s.Err != nil || e.Err != nil {
			return v, fmt.Errorf("no offsets for changelog partition %d: %v %v", p, s.Err, e.Err)
		}
		if s.Offset > 0 && v.lossy == nil {
			v.lossy = fmt.Errorf("changelog partition %d starts at offset %d: records below it were deleted", p, s.Offset)
		}
		if e.Offset > s.Offset {
			want[p] = e.Offset
			from[p] = kgo.NewOffset().At(s.Offset)
			startOf[p] = s.Offset
		}
	}
	var held []int32 // partitions an open transaction holds below their end
	for p, end := range want {
		if l, ok := stable.Lookup(topic, p); ok && l.Err == nil && l.Offset < end {
			held = append(held, p)
		}
	}
	slices.Sort(held)
	started := time.Now()
	waiting := func(what []int32) {
		msg := fmt.Sprintf("reading changelog partitions %v to the end they had when the read began: "+
			"a transaction open on them holds records committed before it (waited %v)", what, time.Since(started).Round(time.Second))
		note(msg)
		cr.log.Warn("the changelog read waits for an open transaction; the partition's signals wait",
			"partition", q.part, "changelog_partitions", what, "waited", time.Since(started).Round(time.Second).String())
	}
	if len(held) > 0 {
		waiting(held)
	}
	// How far the read is: offsets, from each partition's start to the
	// end it is read to, and the bytes fetched of the partitions' size.
	var total int64
	for p, end := range want {
		total += end - startOf[p]
	}
	q.progress.reading(phaseReadChangelog, total, cr.sizeOf(ctx, topic, slices.Sorted(maps.Keys(want))))
	v.start(q.latest)
	if len(want) > 0 {
		rc := cr.take()
		defer cr.give(rc)
		cl, kp := rc.cl, newKeyPartition() // reads side by side: a keyPartition each
		base := rc.fetched.Load()
		cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{topic: from})
		defer cl.RemoveConsumePartitions(map[string][]int32{topic: parts})
		next := maps.Clone(startOf)
		for len(want) > 0 {
			pctx, cancel := context.WithTimeout(ctx, changelogWaitReport)
			fetches := cl.PollFetches(pctx)
			cancel()
			if err := ctx.Err(); err != nil {
				return v, fmt.Errorf("reading the changelog: %w (%d partitions not read to their end)", err, len(want))
			}
			var fetchErr error
			fetches.EachError(func(_ string, _ int32, err error) {
				if !errors.Is(err, context.DeadlineExceeded) {
					fetchErr = err
				}
			})
			if fetchErr != nil {
				return v, fmt.Errorf("reading the changelog: %w", fetchErr)
			}
			if fetches.NumRecords() == 0 {
				waiting(slices.Sorted(maps.Keys(want)))
			}
			fetches.EachRecord(func(r *kgo.Record) {
				if end, ok := want[r.Partition]; ok && r.Offset+1 >= end {
					delete(want, r.Partition)
				}
				if n, ok := next[r.Partition]; ok && r.Offset+1 > n {
					next[r.Partition] = r.Offset + 1
				}
				if r.Attrs.IsControl() {
					return
				}
				user, err := topics.ParseUserID(r.Key)
				if err != nil || kp.of(r.Key, cr.signalPartitions) != q.part {
					return
				}
				if err := v.add(user, r); err != nil {
					cr.log.Warn("changelog record that does not decode; its windows, if any, are lost",
						"partition", r.Partition, "offset", r.Offset, "err", err)
				}
			})
			var done int64
			for p, n := range next {
				done += n - startOf[p]
			}
			q.progress.advance(done, rc.fetched.Load()-base)
		}
		q.progress.reportNow()
	}
	v.finish()
	return v, nil
}

// readerClient is a client of the changelogReader with the bytes it
// fetched (its fetchedBytes hook), for the progress of a read.
type readerClient struct {
	cl      *kgo.Client
	fetched *fetchedBytes
}

// fetchedBytes counts the bytes of the record batches a client fetched,
// as they are in the log (compressed): a franz-go hook.
type fetchedBytes struct{ atomic.Int64 }

var _ kgo.HookFetchBatchRead = (*fetchedBytes)(nil)

func (f *fetchedBytes) OnFetchBatchRead(_ kgo.BrokerMetadata, _ string, _ int32, m kgo.FetchBatchMetrics) {
	f.Add(int64(m.CompressedBytes))
}

// take takes a reader client, waiting for one while every one is in use.
func (cr *changelogReader) take() *readerClient { return <-cr.clients }

// give gives rc back, its partitions removed.
func (cr *changelogReader) give(rc *readerClient) { cr.clients <- rc }

// sizeOf returns the bytes the log segments of topic's partitions parts
// hold (the largest replica's), or -1 when the brokers do not say: a
// progress figure only, so DescribeLogDirs is not required (nor waited
// for long).
func (cr *changelogReader) sizeOf(ctx context.Context, topic string, parts []int32) int64 {
	if len(parts) == 0 {
		return 0
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	set := make(kadm.TopicsSet)
	set.Add(topic, parts...) // partitions named: a topic with none describes nothing
	all, err := cr.adm.DescribeAllLogDirs(ctx, set)
	if err != nil {
		return -1
	}
	size := make(map[int32]int64, len(parts))
	for _, dirs := range all {
		dirs.EachPartition(func(d kadm.DescribedLogDirPartition) {
			if d.Topic == topic && !d.IsFuture {
				size[d.Partition] = max(size[d.Partition], d.Size)
			}
		})
	}
	var total int64
	for _, p := range parts {
		n, ok := size[p]
		if !ok {
			return -1
		}
		total += n
	}
	return total
}

// restoreBytesPerRecord is what a restore holds per changelog record
// read, as a memory budget counts it before the read: a restore header
// of a user with a leave and a rejoin (about 300 bytes) and its entry.
// The records are counted as the commands judged: each wrote one.
const restoreBytesPerRecord = 330

// memBudget bounds the bytes that restores side by side hold at once: a
// weighted semaphore whose waiters say what they wait for.
type memBudget struct {
	capacity int64
	mu       struct {
		sync.Mutex
		held  int64
		freed chan struct{} // closed when bytes are given back
	}
}

func newMemBudget(capacity int64) *memBudget {
	b := &memBudget{capacity: capacity}
	b.mu.freed = make(chan struct{})
	return b
}

// acquire takes n bytes (the whole capacity when n is more: a restore
// alone always runs), waiting while others hold too much; waiting is
// told what they hold, once, when it must wait. release gives them
// back; it may be called more than once.
func (b *memBudget) acquire(ctx context.Context, n int64, waiting func(held int64)) (release func(), err error) {
	if b == nil {
		return func() {}, nil
	}
	n = max(min(n, b.capacity), 0)
	told := false
	for {
		b.mu.Lock()
		if b.mu.held == 0 || b.mu.held+n <= b.capacity {
			b.mu.held += n
			b.mu.Unlock()
			var once sync.Once
			return func() { once.Do(func() { b.give(n) }) }, nil
		}
		held, freed := b.mu.held, b.mu.freed
		b.mu.Unlock()
		if !told {
			waiting(held)
			told = true
		}
		select {
		case <-freed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

func (b *memBudget) give(n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.mu.held -= n
	close(b.mu.freed)
	b.mu.freed = make(chan struct{})
}

// done drops what v holds for a restore: no sort outlives it.
func (v *changelogView) done() {
	if v.restore != nil {
		v.restore.wait()
	}
}

// The phases of a restore, as restoreProgress reports them.
const (
	phaseReadChangelog = "reading the changelog"
	phaseCheckLeavers  = "reading the commands for the users who left"
	phaseWrite         = "writing the users' records"
	phaseGate          = "ingesting and setting the gate"
)

// restoreProgressEvery is how often a restore's progress is reported
// (RestoreProgress events, and so the log) while it reads.
const restoreProgressEvery = 5 * time.Second

// restoreProgress is how far a claim's restore from the changelog is:
// written by the restore, read for PartitionStatus at any time. A nil
// *restoreProgress takes every call and keeps nothing.
type restoreProgress struct {
	report func(RestoreProgressInfo) // the RestoreProgress event; set before the restore starts
	mu     struct {
		sync.Mutex
		on       bool // a restore runs
		info     RestoreProgressInfo
		started  time.Time // the restore's start
		phaseAt  time.Time // the phase's start: rates are over it
		reported time.Time
	}
}

// begin starts reporting a restore of partition.
func (p *restoreProgress) begin(partition int32) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	p.mu.on, p.mu.started, p.mu.phaseAt, p.mu.reported = true, now, now, now
	p.mu.info = RestoreProgressInfo{Partition: partition, BytesTotal: -1}
}

// end stops reporting: the restore is done, or did not happen.
func (p *restoreProgress) end() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mu.on = false
}

// setPhase says the restore is in phase, with nothing to count.
func (p *restoreProgress) setPhase(phase string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mu.phaseAt = time.Now()
	i := &p.mu.info
	i.Phase, i.Records, i.RecordsTotal, i.Bytes, i.BytesTotal = phase, 0, 0, 0, -1
}

// reading says the restore reads records offsets in phase, of bytes
// bytes (-1: unknown).
func (p *restoreProgress) reading(phase string, records, bytes int64) {
	if p == nil {
		return
	}
	p.setPhase(phase)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mu.info.RecordsTotal, p.mu.info.BytesTotal = records, bytes
}

// advance says records offsets and bytes bytes of the phase's are read,
// and reports the progress when it was last reported restoreProgressEvery
// ago.
func (p *restoreProgress) advance(records, bytes int64) {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.mu.info.Records, p.mu.info.Bytes = records, bytes
	now := time.Now()
	report := p.report != nil && now.Sub(p.mu.reported) >= restoreProgressEvery
	if report {
		p.mu.reported = now
	}
	info := p.infoLocked(now)
	p.mu.Unlock()
	if report {
		p.report(info)
	}
}

// reportNow reports the progress as it is: at the end of a phase that
// read records, so that the log has each read's figures whatever its
// length.
func (p *restoreProgress) reportNow() {
	if p == nil || p.report == nil {
		return
	}
	p.mu.Lock()
	now := time.Now()
	p.mu.reported = now
	info := p.infoLocked(now)
	p.mu.Unlock()
	p.report(info)
}

// current returns the progress, and false when no restore runs.
func (p *restoreProgress) current() (RestoreProgressInfo, bool) {
	if p == nil {
		return RestoreProgressInfo{}, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.infoLocked(time.Now()), p.mu.on
}

func (p *restoreProgress) infoLocked(now time.Time) RestoreProgressInfo {
	i := p.mu.info
	i.Elapsed = now.Sub(p.mu.started)
	if d := now.Sub(p.mu.phaseAt).Seconds(); d > 0 {
		i.RecordsPerSecond, i.BytesPerSecond = float64(i.Records)/d, float64(i.Bytes)/d
	}
	return i
}

// leaversRequest is what leavers is asked: the users of commands
// partition part (of parts partitions, the count now) who have a leave
// below offset below that rules C1 to C4 let through (skew is
// Config.MaxFutureSkew).
type leaversRequest struct {
	topic    string
	part     int32
	parts    int32
	below    int64
	skew     time.Duration
	progress *restoreProgress // told how far the read is, if not nil
}

// leavers reads commands partition q.part, read_committed, from its start
// to q.below and returns, ascending and each once, the users of the
// partition with a leave there that rules C1 to C4 let through: each was
// applied, so each user has a changelog record of its own (handover.go).
// A partition that starts above offset 0 (its retention was not
// infinite, as it must be) is read from its start: the leaves it no
// longer holds are not listed, and a replay would not see them either.
func (cr *changelogReader) leavers(ctx context.Context, q leaversRequest) ([]uint64, error) {
	starts, err := cr.adm.ListStartOffsets(ctx, q.topic)
	if err != nil {
		return nil, fmt.Errorf("listing the commands' start offsets: %w", err)
	}
	s, ok := starts.Lookup(q.topic, q.part)
	if !ok || s.Err != nil {
		return nil, fmt.Errorf("no start offset for commands partition %d: %v", q.part, s.Err)
	}
	if s.Offset >= q.below {
		return nil, nil
	}
	q.progress.reading(phaseCheckLeavers, q.below-s.Offset, -1)
	rc := cr.take()
	defer cr.give(rc)
	cl, base := rc.cl, rc.fetched.Load()
	kp := newKeyPartition() // reads side by side: a keyPartition each
	cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{q.topic: {q.part: kgo.NewOffset().At(s.Offset)}})
	defer cl.RemoveConsumePartitions(map[string][]int32{q.topic: {q.part}})
	var users []uint64
	next := s.Offset
	leave, escape := []byte("leave"), []byte(`\`)
	for done := false; !done; {
		pctx, cancel := context.WithTimeout(ctx, changelogWaitReport)
		fetches := cl.PollFetches(pctx)
		cancel()
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("reading commands partition %d below offset %d: %w", q.part, q.below, err)
		}
		var fetchErr error
		fetches.EachError(func(_ string, _ int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) {
				fetchErr = err
			}
		})
		if fetchErr != nil {
			return nil, fmt.Errorf("reading commands partition %d: %w", q.part, fetchErr)
		}
		fetches.EachRecord(func(r *kgo.Record) {
			if r.Topic == q.topic && r.Partition == q.part {
				next = max(next, r.Offset+1)
			}
			if r.Topic != q.topic || r.Partition != q.part || r.Offset >= q.below {
				done = done || (r.Topic == q.topic && r.Partition == q.part)
				return
			}
			if r.Offset+1 >= q.below {
				done = true
			}
			// Only a value that names a leave is decoded: "leave", or
			// an escape that could spell it.
			if r.Attrs.IsControl() || (!bytes.Contains(r.Value, leave) && !bytes.Contains(r.Value, escape)) {
				return
			}
			user, err := topics.ParseUserID(r.Key)
			if err != nil || kp.of(r.Key, q.parts) != q.part {
				return // C1, C2: not applied here
			}
			cmd, err := topics.DecodeCommand(r.Key, r.Value)
			if err != nil || cmd.Op != topics.Leave {
				return // C3
			}
			if _, _, err := boundary(cmd, r.Timestamp, q.skew); err != nil {
				return // C4
			}
			users = append(users, user)
		})
		q.progress.advance(min(next, q.below)-s.Offset, rc.fetched.Load()-base)
	}
	q.progress.reportNow()
	slices.Sort(users)
	return slices.Compact(users), nil
}

// changelogWaitReport is how long a changelog read goes without a record
// before it says what it waits for.
const changelogWaitReport = 10 * time.Second

// start readies v to take records; latest as in windowSource.read.
func (v *changelogView) start(latest bool) {
	v.byUser = make(map[uint64]map[uint64]membership.LateLeave)
	if latest {
		v.restore = &restoreHeaders{}
	}
}

// noWindows is how the processor writes a record's empty list of windows.
var noWindows = []byte(`"late_leaves":[]`)

// add takes user's record r, the latest of the user's so far: its
// windows, merged with the earlier records' per leave (the latest
// forwarded_through, exact only if every record said so), and its restore
// header. It fails on a value that does not decode, whose windows are
// lost.
func (v *changelogView) add(user uint64, r *kgo.Record) error {
	v.stats.records++
	if v.restore != nil {
		var h []byte // the last restore header, if any
		has := false
		for _, hd := range r.Headers {
			if hd.Key == topics.HeaderRestore && r.Value != nil {
				h, has = hd.Value, true
			}
		}
		order := latestOrder
		if follows, _, err := parseRestoreHeader(h); has && err == nil {
			order = follows
		} else if rec, err := topics.DecodeMemberRecord(r.Value); r.Value != nil && err == nil && rec.Command != nil {
			order = restoreOrder{parts: rec.Command.Partitions, offset: rec.Command.Offset}
		}
		v.restore.add(user, h, has, order)
	}
	if bytes.Contains(r.Value, noWindows) {
		return nil // no window to decode (most records)
	}
	rec, err := topics.DecodeMemberRecord(r.Value)
	if err != nil {
		return err
	}
	for _, w := range rec.LateLeaves {
		if w.ForwardedThroughNs < w.LeftAtNs {
			continue // not a window the processor writes
		}
		if v.byUser[user] == nil {
			v.byUser[user] = make(map[uint64]membership.LateLeave)
		}
		lw := membership.LateLeave{LeftAtNs: w.LeftAtNs, ForwardedThroughNs: w.ForwardedThroughNs, Exact: w.Exact}
		if old, ok := v.byUser[user][w.LeftAtNs]; ok {
			lw.ForwardedThroughNs = max(lw.ForwardedThroughNs, old.ForwardedThroughNs)
			lw.Exact = lw.Exact && old.Exact
		}
		v.byUser[user][w.LeftAtNs] = lw
	}
	return nil
}

// finish lists the merged windows, once every record was added.
func (v *changelogView) finish() {
	v.windows = make(map[uint64][]membership.LateLeave, len(v.byUser))
	for user, m := range v.byUser {
		for _, w := range m {
			v.windows[user] = append(v.windows[user], w)
			v.stats.windows++
		}
	}
}

// cleanupPolicy returns the changelog's cleanup.policy.
func (cr *changelogReader) cleanupPolicy(ctx context.Context) (string, error) {
	rcs, err := cr.adm.DescribeTopicConfigs(ctx, cr.topic)
	if err != nil {
		return "", fmt.Errorf("describing the changelog's configs: %w", err)
	}
	rc, err := rcs.On(cr.topic, nil)
	if err != nil {
		return "", fmt.Errorf("describing the changelog's configs: %w", err)
	}
	if rc.Err != nil {
		return "", fmt.Errorf("describing the changelog's configs: %w", rc.Err)
	}
	for _, c := range rc.Configs {
		if c.Key == "cleanup.policy" {
			return c.MaybeValue(), nil
		}
	}
	return "", errors.New("describing the changelog's configs: no cleanup.policy")
}

// restoreHeaderVersion is the first byte of a restore header, followed by
// the commands' partition count and the offset of the command the record
// follows (u32 BE, u64 BE) and the user's dump. Version 1 had no count.
const restoreHeaderVersion = 2

// restoreOrder is where the command a changelog record follows stands in
// its user's commands: under which commands partition count, at which
// offset of the user's partition under it. Counts only grow, and under
// one count every command of a user is applied in one partition, so a
// user's records compare by it in the order of the commands they follow,
// whichever changelog partition they were read from and in which order.
type restoreOrder struct {
	parts  int32
	offset int64
}

// latestOrder is the order of a record that follows no known command: a
// tombstone, or a record that names none. It is taken as the user's
// latest, so that it is never hidden by an older record with a restore
// header: such a user makes a restore replay instead.
var latestOrder = restoreOrder{parts: math.MaxInt32, offset: math.MaxInt64}

func (o restoreOrder) compare(p restoreOrder) int {
	if c := cmp.Compare(o.parts, p.parts); c != 0 {
		return c
	}
	return cmp.Compare(o.offset, p.offset)
}

// appendRestoreHeader appends the head of a restore header for a record
// following the command at offset, applied under parts commands
// partitions; the dump follows.
func appendRestoreHeader(dst []byte, parts int32, offset int64) []byte {
	dst = append(dst, restoreHeaderVersion)
	dst = binary.BigEndian.AppendUint32(dst, uint32(parts))
	return binary.BigEndian.AppendUint64(dst, uint64(offset))
}

// parseRestoreHeader splits a restore header. A version-1 header reads
// with a count of 0: it precedes every record of this version.
func parseRestoreHeader(h []byte) (follows restoreOrder, dump []byte, err error) {
	switch {
	case len(h) >= 1+8 && h[0] == 1:
		follows.offset, dump = int64(binary.BigEndian.Uint64(h[1:9])), h[9:]
	case len(h) >= 1+4+8 && h[0] == restoreHeaderVersion:
		follows.parts = int32(binary.BigEndian.Uint32(h[1:5]))
		follows.offset, dump = int64(binary.BigEndian.Uint64(h[5:13])), h[13:]
	default:
		return restoreOrder{}, nil, fmt.Errorf("restore header of %d bytes, version %d", len(h), firstByte(h))
	}
	if follows.offset < 0 || follows.parts < 0 {
		return restoreOrder{}, nil, fmt.Errorf("restore header following offset %d under %d partitions", follows.offset, follows.parts)
	}
	return follows, dump, nil
}

func firstByte(b []byte) int {
	if len(b) == 0 {
		return -1
	}
	return int(b[0])
}

// restoreHeaders keeps the restore headers of the changelog records read,
// in the order read, for a restore to take each user's latest
// (latest). A partition of a million users is two million records when
// compaction has not run, so nothing here is per record on the heap: the
// headers are copied into an arena of large chunks and indexed by
// pointer-free entries, which the garbage collector does not trace, and
// no map grows by a million users (a map of cloned headers took most of
// the restore's time). The entries come in runs of headerRun; each full
// run is sorted by a goroutine of its own while the read goes on, which
// leaves latest a merge of sorted runs.
type restoreHeaders struct {
	chunks [][]byte
	runs   [][]headerRef // full runs, sorted or being sorted
	cur    []headerRef   // the run being filled
	n      int           // entries added
	sorts  sync.WaitGroup
	err    error // why the headers cannot be used (too many), or nil
}

// headerRef is where a record's restore header is in the arena.
type headerRef struct {
	user    uint64
	follows restoreOrder // the command the record follows
	seq     uint32       // the record's place in the order read
	chunk   uint32
	at      uint32
	n       int32 // the header's length; -1 for a record without one
}

// compareRefs orders refs by user, then by the commands they follow,
// then in the order read: a user's latest record is the one that follows
// its latest command, whatever changelog partition it was read from.
func compareRefs(a, b headerRef) int {
	if c := cmp.Compare(a.user, b.user); c != 0 {
		return c
	}
	if c := a.follows.compare(b.follows); c != 0 {
		return c
	}
	return cmp.Compare(a.seq, b.seq)
}

const (
	// headerChunk is the size of an arena chunk: a few thousand headers
	// (a user's dump with a long history may be larger; it gets a chunk
	// alone).
	headerChunk = 1 << 20
	// headerRun is how many entries a run holds: sorted in a few tens of
	// milliseconds, and few runs to merge at millions of records.
	headerRun = 1 << 18
)

// add appends user's record's header h (has false: the record has none),
// which follows the command follows names.
func (hs *restoreHeaders) add(user uint64, h []byte, has bool, follows restoreOrder) {
	if hs.err != nil {
		return
	}
	if hs.n == math.MaxUint32 || len(h) > math.MaxInt32 {
		hs.err = fmt.Errorf("more than %d changelog records, or a restore header of %d bytes", math.MaxUint32, len(h))
		return
	}
	ref := headerRef{user: user, follows: follows, seq: uint32(hs.n), n: -1}
	if has {
		last := len(hs.chunks) - 1
		if last < 0 || len(hs.chunks[last])+len(h) > cap(hs.chunks[last]) {
			hs.chunks = append(hs.chunks, make([]byte, 0, max(headerChunk, len(h))))
			last++
		}
		ref.chunk, ref.at, ref.n = uint32(last), uint32(len(hs.chunks[last])), int32(len(h))
		hs.chunks[last] = append(hs.chunks[last], h...)
	}
	if hs.cur == nil {
		hs.cur = make([]headerRef, 0, headerRun)
	}
	hs.cur = append(hs.cur, ref)
	hs.n++
	if len(hs.cur) == headerRun {
		run := hs.cur
		hs.runs = append(hs.runs, run)
		hs.cur = nil
		hs.sorts.Add(1)
		go func() {
			defer hs.sorts.Done()
			slices.SortFunc(run, compareRefs)
		}()
	}
}

// wait waits for the runs being sorted. latest calls it; a reader that
// drops hs calls it too, so that no sort outlives the read.
func (hs *restoreHeaders) wait() { hs.sorts.Wait() }

// header returns the header ref points at; ref.n >= 0.
func (hs *restoreHeaders) header(ref headerRef) []byte {
	return hs.chunks[ref.chunk][ref.at : ref.at+uint32(ref.n)]
}

// latest merges the sorted runs and keeps each user's latest entry,
// returning them in user order and how many of them have no header.
func (hs *restoreHeaders) latest() (refs []headerRef, missing int) {
	slices.SortFunc(hs.cur, compareRefs)
	hs.wait()
	runs := hs.runs
	if len(hs.cur) > 0 {
		runs = append(runs, hs.cur)
	}
	hs.runs, hs.cur = nil, nil
	// A k-way merge: the head of every run in a small heap. Runs hold
	// records in the order read, so a user's entries pop in that order
	// and the last popped is the latest.
	out := make([]headerRef, 0, hs.n)
	h := make(refHeap, 0, len(runs))
	for _, r := range runs {
		if len(r) > 0 {
			h = append(h, r)
		}
	}
	heap.Init(&h)
	for len(h) > 0 {
		ref := h[0][0]
		if h[0] = h[0][1:]; len(h[0]) == 0 {
			heap.Pop(&h)
		} else {
			heap.Fix(&h, 0)
		}
		if n := len(out); n > 0 && out[n-1].user == ref.user {
			out[n-1] = ref
			continue
		}
		out = append(out, ref)
	}
	for _, ref := range out {
		if ref.n < 0 {
			missing++
		}
	}
	return out, missing
}

// refHeap is a heap of sorted runs by their heads.
type refHeap [][]headerRef

func (h refHeap) Len() int           { return len(h) }
func (h refHeap) Less(i, j int) bool { return compareRefs(h[i][0], h[j][0]) < 0 }
func (h refHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *refHeap) Push(x any)        { *h = append(*h, x.([]headerRef)) }
func (h *refHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
