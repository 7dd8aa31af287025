package fanout

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/topics"
)

// When the commands' partition count grows from n to m, most users'
// commands belong to another partition than the one they were written
// to: murmur2(user) mod m is not murmur2(user) mod n. A replay under m
// finds each of them misrouted and re-publishes it to its user's
// partition (rule C2), where it is applied in the order it lands. So the
// state under m is rebuilt the same way:
//
//   - every partition's users are restored from the changelog, whatever
//     partition their records are in (handover.go): the state as of every
//     command below the judged offset of the partition it was written to;
//   - each partition's new owner reads, before it forwards, the commands
//     of every other partition that were not read under m yet (a tail:
//     from offset 0 to its end when the partition was claimed) and
//     re-publishes, acknowledged, the ones of its own users;
//   - its signals then wait for an observation of its commands sent after
//     those copies were acknowledged, and for the commands below it
//     applied (alignment.readyAfterNs): no signal of a user whose leave
//     was in another partition is decided before the leave is applied.
//
// A tail is read from offset 0 even when the users were restored from the
// changelog, which holds the commands below the judged offset already:
// the copies are for a replay. A replay under m reads the user's
// partition from offset 0, and meets there the commands produced under m
// before the copies that its own owners of the old partitions re-publish
// (rule C2) after them: a leave before the growth and a rejoin after it
// would be replayed as a rejoin of an active user and then a leave. With
// every command of the user copied before any command produced under m
// is applied, the replay meets them in the order they were produced, as
// the restored state does; the copies are duplicates for the restored
// state (rule C5). The order is the one the user's commands were applied
// in under the old count: those of the partition its key had then, where
// a misrouted command was applied as its rule-C2 copy; the misrouted
// original elsewhere is not copied. Two cases remain where a replay
// meets a user's commands in another order than the live owner applied
// them: a command produced under m before the copies are acknowledged,
// and an original misrouted under n into the partition its user has
// under m, which a replay reads where it lies, before the copies (nothing
// in the log says that it was written under another count).
//
// The owner of the partition a command was found in re-publishes it too,
// by rule C2, when it reads it: every copy after the first changes
// nothing (rule C5). A partition's offset metadata names the new count
// once its own tail was read under it (claim.meta): later owners skip it.

// migrator re-publishes a claim's users' commands from the tails of other
// partitions. The commands side owns it and uses it for one claim at a
// time.
type migrator struct {
	cl         *kgo.Client // reads the commands partitions: the changelog reader's client, idle meanwhile
	prod       *kgo.Client // produces the copies, acknowledged
	topic      string
	partitions int32 // the commands' count now
	kp         keyPartition
	ev         EventListener
	mono       func() int64 // the processor's monotonic clock (clock.monoNow)
}

// migrateChunk is how many copies are produced at once.
const migrateChunk = 1024

// migrate re-publishes to c's partition every command of its users in
// c's tails, each read from offset 0, and has c's signals wait for an
// observation sent after the copies were acknowledged. It retries until
// it succeeds or ctx ends: until then the partition's signals wait.
func (m *migrator) migrate(ctx context.Context, c *claim, restored bool) error {
	start := time.Now()
	info := MigratedInfo{Partition: c.partition, Tails: len(c.tails), Restored: restored}
	for attempt := 1; ; attempt++ {
		read, copied, err := m.once(ctx, c)
		if err == nil {
			info.Read, info.Republished = read, copied
			break
		}
		if ctx.Err() != nil {
			return nil
		}
		if fatal := notAuthorized("re-publishing the commands of users that moved to partition "+fmt.Sprint(c.partition), err); fatal != nil {
			return fatal
		}
		m.ev.MigrationWait(MigrationWaitInfo{Partition: c.partition, Attempt: attempt, Err: err})
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(min(time.Duration(attempt)*time.Second, 10*time.Second)):
		}
	}
	c.readyAfterMono.Store(m.mono())
	info.Took = time.Since(start)
	m.ev.Migrated(info)
	return nil
}

// once reads c's tails and re-publishes the commands of c's users in
// them, returning how many records it read and copied.
func (m *migrator) once(ctx context.Context, c *claim) (read, copied int, err error) {
	from := make(map[int32]kgo.Offset)
	want := make(map[int32]int64)
	under := make(map[int32]int32) // a tail's count its commands were read under, 0 if unknown
	var parts []int32
	for _, t := range c.tails {
		if t.end > 0 {
			from[t.partition] = kgo.NewOffset().At(0)
			want[t.partition] = t.end
			under[t.partition] = t.parts
			parts = append(parts, t.partition)
		}
	}
	if len(want) == 0 {
		return 0, 0, nil
	}
	m.cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{m.topic: from})
	defer m.cl.RemoveConsumePartitions(map[string][]int32{m.topic: parts})
	var pending []*kgo.Record
	flush := func() error {
		if len(pending) == 0 {
			return nil
		}
		if err := m.prod.ProduceSync(ctx, pending...).FirstErr(); err != nil {
			return fmt.Errorf("re-publishing %d commands: %w", len(pending), err)
		}
		copied += len(pending)
		pending = pending[:0]
		return nil
	}
	for len(want) > 0 {
		// A transaction left open on a tail holds it below its end: the
		// read waits (the partition's signals with it) and says so.
		pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		fetches := m.cl.PollFetches(pctx)
		cancel()
		if err := ctx.Err(); err != nil {
			return read, copied, err
		}
		var fetchErr error
		fetches.EachError(func(_ string, _ int32, err error) {
			if !errors.Is(err, context.DeadlineExceeded) {
				fetchErr = err
			}
		})
		if fetchErr != nil {
			return read, copied, fetchErr
		}
		if fetches.NumRecords() == 0 {
			m.ev.MigrationWait(MigrationWaitInfo{Partition: c.partition, Behind: len(want),
				Err: errors.New("no commands read for 10s: a tail may be held by an open transaction")})
		}
		fetches.EachRecord(func(r *kgo.Record) {
			end, ok := want[r.Partition]
			if !ok || r.Offset >= end {
				return
			}
			if r.Offset+1 >= end {
				delete(want, r.Partition)
			}
			if r.Attrs.IsControl() {
				return
			}
			read++
			if _, err := topics.ParseUserID(r.Key); err != nil || m.kp.of(r.Key, m.partitions) != c.partition {
				return // not a command of this partition's users: its own owner settles it
			}
			if k := under[r.Partition]; k > 0 && m.kp.of(r.Key, k) != r.Partition {
				// Misrouted under the count its partition was read
				// under: it was applied, in order, as the copy rule C2
				// put in its user's partition then, which is copied from
				// there; copied from here too, it could land before the
				// commands before it. Not re-published yet, its
				// partition's owner re-publishes it now (rule C2).
				return
			}
			pending = append(pending, republishCommand(r, c.partition))
		})
		if len(pending) >= migrateChunk {
			if err := flush(); err != nil {
				return read, copied, err
			}
		}
	}
	return read, copied, flush()
}
