package workload

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/topics"
)

// player plays the hostile scenes of a plan, one after the other, on its
// own goroutine (Produce starts and joins it). Every record goes out
// synchronously: a scene's records are in Kafka in the order it writes
// them, and a signal produced after a leave is stamped after that leave's
// acknowledgement.
type player struct {
	c       *Clients
	set     topics.Set
	h       Hostile // defaults filled in
	parts   int32
	routing func(commands bool) int32 // Config.Routing; nil: parts
	size    int                       // value size of an ordinary signal

	seq     atomic.Uint64 // next signal id: the friendly load's ids end below Config.Signals
	signals atomic.Int64  // hostile signals acknowledged
	records atomic.Int64  // hostile commands and other records acknowledged
	scenes  atomic.Int64  // scenes played to their end
}

func newPlayer(c *Clients, set topics.Set, cfg Config) *player {
	p := &player{c: c, set: set, h: cfg.Hostile.withDefaults(), parts: int32(cfg.Partitions), routing: cfg.Routing, size: cfg.ValueSize}
	p.seq.Store(uint64(cfg.Signals))
	return p
}

// play plays one scene.
func (p *player) play(ctx context.Context, s Scene) error {
	if p.c.Hostile == nil || p.c.Txn == nil {
		return fmt.Errorf("workload: scene %d (%s): no hostile clients", s.Index, s.Kind)
	}
	sc := &scene{p: p, s: s, rng: rand.New(rand.NewPCG(s.Seed, uint64(s.Index)))}
	var err error
	switch s.Kind {
	case KindMisroute:
		err = sc.misroute(ctx)
	case KindTxnHeld:
		err = sc.txnHeld(ctx)
	case KindTxnAbort:
		err = sc.txnAbort(ctx)
	case KindRedeliver:
		err = sc.redeliver(ctx)
	case KindLateLeave:
		err = sc.lateLeave(ctx)
	case KindSameMilli:
		err = sc.sameMilli(ctx)
	case KindFuture:
		err = sc.future(ctx)
	case KindPoison:
		err = sc.poison(ctx)
	default:
		err = fmt.Errorf("unknown kind")
	}
	if err != nil {
		return fmt.Errorf("workload: scene %d (%s, users %v): %w", s.Index, s.Kind, s.Users, err)
	}
	p.scenes.Add(1)
	return nil
}

// scene is one scene being played.
type scene struct {
	p   *player
	s   Scene
	rng *rand.Rand
}

// noGate is the gatedFrom of a signal that the load does not mark gated.
const noGate = -1

// nsOf is t in ns since the Unix epoch, as boundaries are.
func nsOf(t time.Time) int64 { return t.UnixNano() }

// route names a partition for a key: its murmur2 partition (as Java and
// franz-go clients), or its CRC32 one (as librdkafka's default).
type route uint8

const (
	murmur route = iota
	crc
)

// count is the partition count records of the commands topic (commands
// true) or of the inputs are routed by now.
func (p *player) count(commands bool) int32 {
	if p.routing != nil {
		return p.routing(commands)
	}
	return p.parts
}

func (sc *scene) partition(key []byte, r route, commands bool) int32 {
	n := sc.p.count(commands)
	if r == crc {
		return crcPartition(key, n)
	}
	return murmurPartition(key, n)
}

// produce writes rs with cl and waits for their acknowledgement.
func (sc *scene) produce(ctx context.Context, cl *kgo.Client, rs ...*kgo.Record) error {
	if err := cl.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		return err
	}
	sc.p.records.Add(int64(len(rs)))
	return nil
}

// signal produces a signal of user stamped now, to the partition r gives
// its key. When gatedFrom is not noGate, the user's leave with that
// boundary was acknowledged before: the signal is marked gated if its
// event time (ms) lies at or after the boundary.
func (sc *scene) signal(ctx context.Context, user uint64, r route, gatedFrom int64) error {
	return sc.signalAt(ctx, user, r, gatedFrom, time.Now())
}

func (sc *scene) signalAt(ctx context.Context, user uint64, r route, gatedFrom int64, ts time.Time) error {
	key := userKey(user)
	rec := sc.signalRecord(key, sc.partition(key, r, false), sc.p.size, ts)
	if gatedFrom != noGate && ts.UnixMilli()*int64(time.Millisecond) >= gatedFrom {
		rec.Headers = append(rec.Headers, gatedHeaders()...)
	}
	return sc.produceSignal(ctx, rec)
}

// nextMilli waits until the wall clock is in a millisecond after the one
// of boundary b (ns): a signal stamped then lies at or after b, although
// Kafka keeps only milliseconds. It is a pause of at most a millisecond,
// not a wait for a condition.
func nextMilli(ctx context.Context, b int64) error {
	next := time.Unix(0, b).Truncate(time.Millisecond).Add(time.Millisecond)
	return Sleep(ctx, time.Until(next))
}

// signals produces n signals of user, pause apart.
func (sc *scene) signals(ctx context.Context, n int, pause time.Duration, user uint64, r route, gatedFrom int64) error {
	for i := range n {
		if i > 0 {
			if err := Sleep(ctx, pause); err != nil {
				return err
			}
		}
		if err := sc.signal(ctx, user, r, gatedFrom); err != nil {
			return err
		}
	}
	return nil
}

// signalsFor produces signals of user every 100ms for d.
func (sc *scene) signalsFor(ctx context.Context, d time.Duration, user uint64, gatedFrom int64) error {
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		if err := sc.signal(ctx, user, murmur, gatedFrom); err != nil {
			return err
		}
		if err := Sleep(ctx, 100*time.Millisecond); err != nil {
			return err
		}
	}
	return nil
}

// signalRecord is a signal with the next id, of size bytes: an ordinary
// one when size is the load's value size, else padded with seeded random
// letters (incompressible enough that its size on the wire is its size).
func (sc *scene) signalRecord(key []byte, partition int32, size int, ts time.Time) *kgo.Record {
	seq := sc.p.seq.Add(1) - 1
	var v []byte
	if size <= sc.p.size {
		v = AppendValue(nil, seq, size)
	} else {
		v = sc.randomFill(AppendValue(nil, seq, 0), size)
	}
	return &kgo.Record{Topic: string(sc.p.set.Signals), Partition: partition, Key: key, Value: v, Timestamp: ts}
}

// produceSignal produces rec, and a copy of it to each further route's
// input (the same partition: inputs are co-partitioned).
func (sc *scene) produceSignal(ctx context.Context, rec *kgo.Record) error {
	recs := []*kgo.Record{rec}
	for _, in := range sc.p.set.Inputs()[1:] {
		cp := *rec
		cp.Topic = string(in)
		recs = append(recs, &cp)
	}
	if err := sc.p.c.Hostile.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		return fmt.Errorf("producing signal %q of %d bytes to partition %d: %w", rec.Key, len(rec.Value), rec.Partition, err)
	}
	sc.p.signals.Add(1)
	return nil
}

// randomFill appends seeded random lower-case letters to b up to size bytes.
func (sc *scene) randomFill(b []byte, size int) []byte {
	for len(b) < size {
		b = append(b, 'a'+byte(sc.rng.IntN(26)))
	}
	return b
}

// boundary is how a command's at_ns is set: at the wall clock when it is
// produced (now), absent (the record timestamp stands in), or explicit.
type boundary struct {
	absent bool
	ns     int64 // explicit when not zero
}

var (
	atNow  = boundary{}
	noAtNs = boundary{absent: true}
)

func atNs(ns int64) boundary { return boundary{ns: ns} }

// command produces a command of user with cl (Hostile or, inside a
// transaction, Txn) to the partition r gives its key, stamped ts (now when
// zero), request id "h<scene>-<req>". It returns the record and the
// command's boundary. A command stamped now returns once the wall clock is
// past its boundary's millisecond, so that a signal produced next lies at
// or after the boundary (Kafka timestamps are milliseconds).
func (sc *scene) command(ctx context.Context, cl *kgo.Client, user uint64, op topics.Op, b boundary, ts time.Time, req string, r route) (*kgo.Record, int64, error) {
	if ts.IsZero() {
		ts = time.Now()
	}
	c := topics.Command{Op: op, UserID: user, RequestID: "h" + strconv.Itoa(sc.s.Index) + "-" + req}
	at := ts.UnixMilli() * int64(time.Millisecond)
	switch {
	case b.absent:
	case b.ns != 0:
		c.AtNs, c.HasAt, at = uint64(b.ns), true, b.ns
	default:
		c.AtNs, c.HasAt, at = uint64(nsOf(ts)), true, nsOf(ts)
	}
	key := userKey(user)
	rec := &kgo.Record{Topic: string(sc.p.set.Commands), Partition: sc.partition(key, r, true), Key: key,
		Value: topics.AppendCommand(nil, c), Timestamp: ts}
	if err := sc.produce(ctx, cl, rec); err != nil {
		return nil, 0, fmt.Errorf("producing %s of user %d: %w", op, user, err)
	}
	if b == atNow {
		if err := nextMilli(ctx, at); err != nil {
			return nil, 0, err
		}
	}
	return rec, at, nil
}

// again produces rec once more, unchanged: a producer retry or a
// re-publish.
func (sc *scene) again(ctx context.Context, rec *kgo.Record) error {
	cp := &kgo.Record{Topic: rec.Topic, Partition: rec.Partition, Key: rec.Key, Value: rec.Value, Timestamp: rec.Timestamp}
	if err := sc.produce(ctx, sc.p.c.Hostile, cp); err != nil {
		return fmt.Errorf("producing %s again: %w", rec.Value, err)
	}
	return nil
}
