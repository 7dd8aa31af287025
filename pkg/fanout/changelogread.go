package fanout

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync/atomic"
	"time"

	"github.com/cohortgate/cohortgate/pkg/membership"
	"github.com/cohortgate/cohortgate/topics"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A changelog read: what earlier owners wrote for the users of a signals
// partition, for the late-leave windows a new owner recovers (recover.go)
// and for a restore of the partition's users (handover.go).

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
	// spill is how much of the restore headers a read with latest holds
	// and where those beyond go.
	spill spillTo
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

// changelogReader is the windowSource of a running processor: it reads the
// changelog with one client made at start (a Kafka client made mid-run
// would share the metrics hooks with running ones), adding and removing
// the partitions it reads. Only the commands side uses it.
type changelogReader struct {
	// clients are the reader clients not in use: a read or a leavers
	// check takes one for its duration, so that restores side by side
	// each fetch (and decompress, on the client's goroutine) on their own.
	clients chan *readerClient
	adm     *kadm.Client
	// raw sends abortedTail's fetches: not a reader client, whose fetch
	// connection its consumer's long polls hold (5s each).
	raw                 *kgo.Client
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
	v.start(q)
	if len(want) > 0 {
		rc := cr.take()
		defer cr.give(rc)
		cl, kp := rc.cl, newKeyPartition() // reads side by side: a keyPartition each
		base := rc.fetched.Load()
		cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{topic: from})
		defer cl.RemoveConsumePartitions(map[string][]int32{topic: parts})
		next := maps.Clone(startOf)
		quiet := time.Now() // since the last record, or the last report of the wait
		for len(want) > 0 {
			pctx, cancel := context.WithTimeout(ctx, changelogTailCheck)
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
				cr.passAbortedTails(ctx, want, next)
				if len(want) > 0 && time.Since(quiet) >= changelogWaitReport {
					waiting(slices.Sorted(maps.Keys(want)))
					quiet = time.Now()
				}
			} else {
				quiet = time.Now()
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
			if v.restore != nil && v.restore.failed != nil {
				break // the restore fails on it: the rest is of no use
			}
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

// done drops what v holds for a restore: no sort outlives it, and no
// spill file.
func (v *changelogView) done() {
	if v.restore != nil {
		v.restore.done()
	}
}

// leaversRequest is what leavers is asked: the users of commands
// partition part (of parts partitions, the count now) who have a leave
// below offset below that rules C1 to C4 let through (skew is
// Config.MaxFutureSkew), other than the users recorded.
type leaversRequest struct {
	topic string
	part  int32
	parts int32
	below int64
	skew  time.Duration
	// recorded lists, ascending, the users a caller already knows to
	// have a changelog record: their commands are not decoded, nor
	// their users listed. Decoding every leave of a partition was most
	// of the read's own CPU, and a restore asks only about users without
	// a record.
	recorded []uint64
	progress *restoreProgress // told how far the read is, if not nil
}

// leavers reads commands partition q.part, read_committed, from its start
// to q.below and returns, ascending and each once, the users of the
// partition with a leave there that rules C1 to C4 let through, but for
// those in q.recorded: each was applied, so each user has a changelog
// record of its own (handover.go).
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
		pctx, cancel := context.WithTimeout(ctx, changelogTailCheck)
		fetches := cl.PollFetches(pctx)
		cancel()
		if err := ctx.Err(); err != nil {
			return nil, fmt.Errorf("reading commands partition %d below offset %d: %w", q.part, q.below, err)
		}
		if fetches.NumRecords() == 0 && cr.raw != nil {
			// A producer's transaction aborted without its marker
			// (see abortedTail) would hold the read forever.
			if ok, err := abortedTail(ctx, cr.raw, q.topic, q.part, next, q.below); err == nil && ok {
				break
			}
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
			if _, ok := slices.BinarySearch(q.recorded, user); ok {
				return // not asked about
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

// changelogTailCheck is how long a read polls for records before it looks
// whether what it waits for is a tail of aborted transactions without
// markers (abortedTail): a restart waits on its reads.
const changelogTailCheck = 500 * time.Millisecond

// passAbortedTails removes from want (partition → end still to reach) each
// partition whose records from next (one past the highest delivered) to
// its end are all of aborted transactions with no marker after them (see
// abortedTail): nothing is left there for the read.
func (cr *changelogReader) passAbortedTails(ctx context.Context, want, next map[int32]int64) {
	if cr.raw == nil {
		return
	}
	for p, end := range want {
		ok, err := abortedTail(ctx, cr.raw, cr.topic, p, next[p], end)
		if err != nil {
			cr.log.Debug("changelog tail not checked", "partition", p, "err", err)
			continue
		}
		if ok {
			cr.log.Info("changelog partition read to its end: the records left below it are of aborted transactions without markers (a broker restarted after a crash)",
				"changelog_partition", p, "from", next[p], "end", end)
			delete(want, p)
		}
	}
}

// start readies v to take the records q asks for.
func (v *changelogView) start(q readRequest) {
	v.byUser = make(map[uint64]map[uint64]membership.LateLeave)
	if q.latest {
		v.restore = newRestoreHeaders(q.spill)
	}
}

// noWindows is how the processor writes a record's empty list of windows.
var noWindows = []byte(`"late_leaves":[]`)

// hasNoWindows reports whether value holds noWindows, as bytes.Contains
// would. It looks for noWindows' one '[' (a handful in a record) where
// bytes.Contains looks for its first byte, '"', which is every few bytes
// of JSON: that search was a tenth of a restore's read.
func hasNoWindows(value []byte) bool {
	const open = len(`"late_leaves":`) // noWindows[open] == '['
	for i := open; i < len(value); {
		j := bytes.IndexByte(value[i:], '[')
		if j < 0 {
			return false
		}
		i += j
		if i+len(noWindows)-open <= len(value) && bytes.Equal(value[i-open:i-open+len(noWindows)], noWindows) {
			return true
		}
		i++
	}
	return false
}

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
	if hasNoWindows(r.Value) {
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
