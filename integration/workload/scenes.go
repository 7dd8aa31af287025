package workload

import (
	"context"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/integration/oracle"
	"github.com/cohortgate/cohortgate/topics"
)

// The scenes, one method per Kind. Each writes only its own users' records.
// A signal is marked gated only when a leave of its user that covers it was
// acknowledged before it, by a correctly routed, committed, valid command:
// never after a misrouted leave (it counts from its re-publishing), nor for
// a leave inside a transaction before the commit.

// misroute: three signals, a leave and three more signals, all to the
// user's CRC32 partition (which differs from its murmur2 one when the
// topics have more than one partition), then one signal to the right one.
func (sc *scene) misroute(ctx context.Context) error {
	u := sc.s.Users[0]
	if err := sc.signals(ctx, 3, 40*time.Millisecond, u, crc, noGate); err != nil {
		return err
	}
	if _, _, err := sc.command(ctx, sc.p.c.Hostile, u, topics.Leave, atNow, time.Time{}, "leave", crc); err != nil {
		return err
	}
	if err := sc.signals(ctx, 3, 40*time.Millisecond, u, crc, noGate); err != nil {
		return err
	}
	return sc.signal(ctx, u, murmur, noGate)
}

// txnHeld: user x leaves inside a transaction that stays open for
// Scene.Hold; meanwhile v1 and v2, in x's partition, leave with the plain
// producer and keep sending signals (gated: their leaves were
// acknowledged), as x does. A processor that observes the high watermark
// holds the partition's signals until the commit; one that observes the
// last stable offset forwards v1's and v2's.
func (sc *scene) txnHeld(ctx context.Context) (err error) {
	x, v1, v2 := sc.s.Users[0], sc.s.Users[1], sc.s.Users[2]
	for _, u := range sc.s.Users {
		if err := sc.signal(ctx, u, murmur, noGate); err != nil {
			return err
		}
	}
	txn := sc.p.c.Txn
	if err := txn.BeginTransaction(); err != nil {
		return fmt.Errorf("beginning the transaction: %w", err)
	}
	committed := false
	defer func() {
		if !committed {
			actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abortTimeout)
			defer cancel()
			_ = txn.EndTransaction(actx, kgo.TryAbort)
		}
	}()
	start := time.Now()
	_, bx, err := sc.command(ctx, txn, x, topics.Leave, atNow, time.Time{}, "txn-leave", murmur)
	if err != nil {
		return err
	}
	_, b1, err := sc.command(ctx, sc.p.c.Hostile, v1, topics.Leave, atNow, time.Time{}, "leave", murmur)
	if err != nil {
		return err
	}
	_, b2, err := sc.command(ctx, sc.p.c.Hostile, v2, topics.Leave, atNow, time.Time{}, "leave", murmur)
	if err != nil {
		return err
	}
	for time.Since(start) < sc.s.Hold {
		if err := sc.each(ctx, []userGate{{v1, b1}, {v2, b2}, {x, noGate}}); err != nil {
			return err
		}
		if err := Sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
	if err := txn.EndTransaction(ctx, kgo.TryCommit); err != nil {
		return fmt.Errorf("committing the held transaction: %w", err)
	}
	committed = true
	return sc.each(ctx, []userGate{{x, bx}, {v1, b1}, {v2, b2}})
}

// userGate is a user and the gatedFrom of its next signal.
type userGate struct {
	user uint64
	from int64
}

// each produces one signal of each user.
func (sc *scene) each(ctx context.Context, us []userGate) error {
	for _, u := range us {
		if err := sc.signal(ctx, u.user, murmur, u.from); err != nil {
			return err
		}
	}
	return nil
}

// abortTimeout bounds aborting a scene's transaction. It outlasts a
// broker fault (a coordinator killed or paused past its session, in the
// chaos harness's cluster scenarios), after which the abort goes through.
const abortTimeout = time.Minute

// txnAbort: a leave inside a transaction that is aborted after 300ms; the
// user's signals before, during and after must all be forwarded.
func (sc *scene) txnAbort(ctx context.Context) error {
	y := sc.s.Users[0]
	if err := sc.signal(ctx, y, murmur, noGate); err != nil {
		return err
	}
	txn := sc.p.c.Txn
	if err := txn.BeginTransaction(); err != nil {
		return fmt.Errorf("beginning the transaction: %w", err)
	}
	_, _, err := sc.command(ctx, txn, y, topics.Leave, atNow, time.Time{}, "aborted-leave", murmur)
	if err == nil {
		err = sc.signals(ctx, 3, 100*time.Millisecond, y, murmur, noGate)
	}
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), abortTimeout)
	defer cancel()
	if aerr := txn.EndTransaction(actx, kgo.TryAbort); aerr != nil && err == nil {
		err = fmt.Errorf("aborting the transaction: %w", aerr)
	}
	if err != nil {
		return err
	}
	return sc.signals(ctx, 3, 50*time.Millisecond, y, murmur, noGate)
}

// redeliver: re-deliveries for u (rule C5) — leave a, rejoin b, a leave c
// with a boundary between them (clamped to b), rejoin d, then c again, the
// same record, which must change nothing: u's signals after d are
// forwarded. And for w: a leave, the same record again, then a leave with
// a new request id and a later boundary (a new command that changes
// nothing). Rejoins are never re-delivered with a new request id (see the
// package documentation).
func (sc *scene) redeliver(ctx context.Context) error {
	u, w := sc.s.Users[0], sc.s.Users[1]
	hostile := sc.p.c.Hostile
	_, a, err := sc.command(ctx, hostile, u, topics.Leave, atNow, time.Time{}, "a", murmur)
	if err != nil {
		return err
	}
	if err := sc.signals(ctx, 2, 30*time.Millisecond, u, murmur, a); err != nil {
		return err
	}
	_, b, err := sc.command(ctx, hostile, u, topics.Rejoin, atNow, time.Time{}, "b", murmur)
	if err != nil {
		return err
	}
	if err := sc.signals(ctx, 2, 30*time.Millisecond, u, murmur, noGate); err != nil {
		return err
	}
	c, _, err := sc.command(ctx, hostile, u, topics.Leave, atNs(a+(b-a)/2), time.Time{}, "c", murmur)
	if err != nil {
		return err
	}
	if err := sc.signals(ctx, 2, 30*time.Millisecond, u, murmur, b); err != nil { // c is clamped to b
		return err
	}
	if _, _, err := sc.command(ctx, hostile, u, topics.Rejoin, atNow, time.Time{}, "d", murmur); err != nil {
		return err
	}
	if err := sc.signals(ctx, 2, 30*time.Millisecond, u, murmur, noGate); err != nil {
		return err
	}
	if err := sc.again(ctx, c); err != nil {
		return err
	}
	if err := sc.signals(ctx, 3, 30*time.Millisecond, u, murmur, noGate); err != nil {
		return err
	}

	w1, bw, err := sc.command(ctx, hostile, w, topics.Leave, atNow, time.Time{}, "w1", murmur)
	if err != nil {
		return err
	}
	if err := sc.signals(ctx, 2, 30*time.Millisecond, w, murmur, bw); err != nil {
		return err
	}
	if err := sc.again(ctx, w1); err != nil {
		return err
	}
	if err := sc.signals(ctx, 2, 30*time.Millisecond, w, murmur, bw); err != nil {
		return err
	}
	if _, _, err := sc.command(ctx, hostile, w, topics.Leave, atNow, time.Time{}, "w2", murmur); err != nil {
		return err
	}
	return sc.signals(ctx, 2, 30*time.Millisecond, w, murmur, bw)
}

// lateLeave: l sends signals for Scene.Late, then leaves with a boundary
// Scene.Late back (beyond the grace: its earlier signals were forwarded,
// a late-leave window); e leaves now, then again with a boundary a second
// beyond the grace earlier (the earliest boundary wins, and what e sent in
// between is in a window). Neither rejoins: a rejoin before a window is
// recorded could leave an exact window with nothing of a final episode in
// it, which the oracle would call spurious.
func (sc *scene) lateLeave(ctx context.Context) error {
	l, e := sc.s.Users[0], sc.s.Users[1]
	hostile := sc.p.c.Hostile
	if err := sc.signalsFor(ctx, sc.s.Late+300*time.Millisecond, l, noGate); err != nil {
		return err
	}
	_, bl, err := sc.command(ctx, hostile, l, topics.Leave, atNs(nsOf(time.Now().Add(-sc.s.Late))), time.Time{}, "late", murmur)
	if err != nil {
		return err
	}
	if err := sc.signals(ctx, 3, 30*time.Millisecond, l, murmur, bl); err != nil {
		return err
	}
	back := sc.p.h.Grace + time.Second
	if err := sc.signalsFor(ctx, back+300*time.Millisecond, e, noGate); err != nil {
		return err
	}
	_, e1, err := sc.command(ctx, hostile, e, topics.Leave, atNow, time.Time{}, "e1", murmur)
	if err != nil {
		return err
	}
	if err := sc.signals(ctx, 2, 30*time.Millisecond, e, murmur, e1); err != nil {
		return err
	}
	_, e2, err := sc.command(ctx, hostile, e, topics.Leave, atNs(e1-int64(back)), time.Time{}, "e2", murmur)
	if err != nil {
		return err
	}
	return sc.signals(ctx, 2, 30*time.Millisecond, e, murmur, e2)
}

// sameMilli: a leave and a rejoin without at_ns, stamped in one
// millisecond, then a signal stamped in that millisecond and two later:
// the empty episode holds none of them.
func (sc *scene) sameMilli(ctx context.Context) error {
	u := sc.s.Users[0]
	if err := sc.signal(ctx, u, murmur, noGate); err != nil {
		return err
	}
	t := time.Now().Truncate(time.Millisecond)
	if _, _, err := sc.command(ctx, sc.p.c.Hostile, u, topics.Leave, noAtNs, t, "leave", murmur); err != nil {
		return err
	}
	if _, _, err := sc.command(ctx, sc.p.c.Hostile, u, topics.Rejoin, noAtNs, t, "rejoin", murmur); err != nil {
		return err
	}
	if err := sc.signalAt(ctx, u, murmur, noGate, t); err != nil {
		return err
	}
	return sc.signals(ctx, 2, 30*time.Millisecond, u, murmur, noGate)
}

// futureSignal is how far beyond the skew the future scene stamps its
// signal: far enough that no clock step excuses it, and within Kafka's
// default log.message.timestamp.after.max.ms (an hour since Kafka 4.0),
// beyond which the broker refuses the record.
const futureSignal = 5 * time.Minute

// future: a leave whose boundary is an hour beyond the skew ahead of its
// own timestamp (dead-lettered: the user's signals go on), and a signal
// stamped five minutes beyond the skew ahead of the clock (dead-lettered,
// marked for the oracle).
func (sc *scene) future(ctx context.Context) error {
	u := sc.s.Users[0]
	ahead := sc.p.h.MaxFutureSkew + time.Hour
	if err := sc.signal(ctx, u, murmur, noGate); err != nil {
		return err
	}
	now := time.Now()
	if _, _, err := sc.command(ctx, sc.p.c.Hostile, u, topics.Leave, atNs(nsOf(now.Add(ahead))), now, "future", murmur); err != nil {
		return err
	}
	if err := sc.signals(ctx, 2, 30*time.Millisecond, u, murmur, noGate); err != nil {
		return err
	}
	key := userKey(u)
	rec := sc.signalRecord(key, sc.partition(key, murmur, false), sc.p.size, time.Now().Add(sc.p.h.MaxFutureSkew+futureSignal))
	rec.Headers = []kgo.RecordHeader{{Key: oracle.HeaderExpect, Value: []byte(oracle.ExpectTimestampSkew)}}
	if err := sc.produceSignal(ctx, rec); err != nil {
		return err
	}
	return sc.signal(ctx, u, murmur, noGate)
}
