package fanout

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cohortgate/cohortgate/topics"
)

// TestPlanCommit pins what a cycle commits, for both kinds of session.
func TestPlanCommit(t *testing.T) {
	eo := func(epoch int32, off int64) kgo.EpochOffset { return kgo.EpochOffset{Epoch: epoch, Offset: off} }
	uncommitted := map[int32]kgo.EpochOffset{0: eo(1, 100), 1: eo(1, 100), 2: eo(1, 100)}
	committed := map[int32]kgo.EpochOffset{5: eo(3, 55), 6: eo(3, 66)}
	got := planCommit(uncommitted, committed, map[int32]position{
		0: {held: true, at: eo(2, 40), meta: "7"},         // held: its first undecided record
		1: {meta: "8", refresh: true},                     // polled: franz-go's offset
		5: {meta: "9", refresh: true},                     // not polled: its committed offset, new metadata
		6: {meta: "10"},                                   // not polled, metadata unchanged: left out
		7: {meta: "11", refresh: true},                    // never committed, the group not answered: nothing to commit
		8: {meta: "12", refresh: true, uncommitted: true}, // the group has no commit: at 0, where consuming starts at the latest
		9: {meta: "13", uncommitted: true},                // no commit, metadata unchanged: left out
	})
	want := map[int32]planned{
		0: {at: eo(2, 40), meta: "7", hasMeta: true},
		1: {at: eo(1, 100), meta: "8", hasMeta: true},
		2: {at: eo(1, 100)}, // polled, its lane gone: franz-go's offset and metadata
		5: {at: eo(3, 55), meta: "9", hasMeta: true},
		8: {at: eo(-1, 0), meta: "12", hasMeta: true},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("planCommit = %+v\nwant %+v", got, want)
	}
}

// TestApplyPlan checks that the TxnOffsetCommit franz-go sends carries the
// plan: its own partitions rewritten, the plan's others added, other
// topics untouched.
func TestApplyPlan(t *testing.T) {
	req := kmsg.NewPtrTxnOffsetCommitRequest()
	for _, topic := range []string{"signals", "other"} {
		rt := kmsg.NewTxnOffsetCommitRequestTopic()
		rt.Topic = topic
		for p := int32(0); p < 3; p++ {
			rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
			rp.Partition, rp.Offset, rp.LeaderEpoch = p, 100, 1
			rt.Partitions = append(rt.Partitions, rp)
		}
		req.Topics = append(req.Topics, rt)
	}
	applyPlan(req, "signals", map[int32]planned{
		0: {at: kgo.EpochOffset{Epoch: 2, Offset: 40}, meta: "7", hasMeta: true},
		1: {at: kgo.EpochOffset{Epoch: 1, Offset: 100}, meta: "8", hasMeta: true},
		2: {at: kgo.EpochOffset{Epoch: 1, Offset: 100}},
		5: {at: kgo.EpochOffset{Epoch: 3, Offset: 55}, meta: "9", hasMeta: true},
	})
	sig := req.Topics[0].Partitions
	if sig[0].Offset != 40 || sig[0].LeaderEpoch != 2 || *sig[0].Metadata != "7" {
		t.Errorf("held partition: %+v", sig[0])
	}
	if sig[1].Offset != 100 || *sig[1].Metadata != "8" {
		t.Errorf("polled partition: %+v", sig[1])
	}
	if sig[2].Offset != 100 || sig[2].Metadata != nil {
		t.Errorf("partition without a position: %+v", sig[2])
	}
	if len(sig) != 4 || sig[3].Partition != 5 || sig[3].Offset != 55 || sig[3].LeaderEpoch != 3 || *sig[3].Metadata != "9" {
		t.Errorf("refreshed partitions: %+v, want partition 5 added at its committed offset", sig[3:])
	}
	if other := req.Topics[1].Partitions; other[0].Offset != 100 || other[0].Metadata != nil || len(other) != 3 {
		t.Errorf("other topic touched: %+v", other)
	}
	// A request without the topic gains it.
	empty := kmsg.NewPtrTxnOffsetCommitRequest()
	applyPlan(empty, "signals", map[int32]planned{5: {at: kgo.EpochOffset{Offset: 55}, meta: "9", hasMeta: true}})
	if len(empty.Topics) != 1 || empty.Topics[0].Topic != "signals" || len(empty.Topics[0].Partitions) != 1 {
		t.Errorf("request without the topic: %+v", empty.Topics)
	}
}

// recordingSession keeps a copy of what is produced, as it was when
// produced, and answers every promise at once, successfully; its failures
// count as a real session's do.
type recordingSession struct {
	session  // the methods these tests do not call
	failed   failures
	produced []kgo.Record
}

func (s *recordingSession) counted(p func(*kgo.Record, error)) countedPromise {
	return s.failed.wrap(p)
}

func (s *recordingSession) produce(_ context.Context, r *kgo.Record, p countedPromise) {
	s.produced = append(s.produced, *r)
	p.fn(r, nil)
}

// TestCountedPromiseCountsFailures: a failure reaches the promise and the
// cycle's count, a success only the promise.
func TestCountedPromiseCountsFailures(t *testing.T) {
	var f failures
	var seen []error
	p := f.wrap(func(_ *kgo.Record, err error) { seen = append(seen, err) })
	boom := errors.New("refused")
	p.fn(nil, nil)
	p.fn(nil, boom)
	if n := f.n.Load(); n != 1 || len(seen) != 2 || seen[1] != boom {
		t.Fatalf("failures %d, promise saw %v; want 1 and [<nil> %v]", n, seen, boom)
	}
}

// TestForwardAllocatesNothing: forwarding a signal allocates nothing per
// record once warm: its output record is given back by its promise and
// reused (the promise itself is counted once, when the emitter is made).
func TestForwardAllocatesNothing(t *testing.T) {
	m, err := newMetrics(prometheus.NewRegistry(), gauges{})
	if err != nil {
		t.Fatal(err)
	}
	set := topics.Set{Commands: "c", Signals: "s", Cohort: "out", DLQ: "dlq", Changelog: "cl"}
	s := &recordingSession{produced: make([]kgo.Record, 0, 2000)}
	e := newEmitter(s, set, limits{}, nil, &refusals{}, m, m.routes([]string{"s"}), *(&EventListener{}).EnsureDefaults(), func(error) {})
	in := &kgo.Record{Topic: "s", Key: []byte("42"), Value: []byte("v"), Offset: 1}
	ctx := context.Background()
	// A collection may empty the pool meanwhile: then one allocation.
	allocs := testing.AllocsPerRun(1000, func() { e.forward(ctx, in, 0, false) })
	if allocs > 0.01 {
		t.Fatalf("forward allocates %v times per signal, want 0", allocs)
	}
	for i, out := range s.produced {
		if out.Topic != "out" || string(out.Key) != "42" || string(out.Value) != "v" || out.Offset != 0 || out.Context != nil {
			t.Fatalf("forwarded %d: %+v", i, out)
		}
	}
}

// TestForwardedRecordIsClearedForReuse: once its promise ran, an output
// record keeps no reference to its signal (a pooled record would keep the
// fetched batch alive) and is handed out again.
func TestForwardedRecordIsClearedForReuse(t *testing.T) {
	m, err := newMetrics(prometheus.NewRegistry(), gauges{})
	if err != nil {
		t.Fatal(err)
	}
	var outs []*kgo.Record
	s := &pointerSession{keep: &outs}
	set := topics.Set{Commands: "c", Signals: "s", Cohort: "out", DLQ: "dlq", Changelog: "cl"}
	e := newEmitter(s, set, limits{}, nil, &refusals{}, m, m.routes([]string{"s"}), *(&EventListener{}).EnsureDefaults(), func(error) {})
	in := &kgo.Record{Topic: "s", Key: []byte("42"), Value: []byte("v"), Headers: []kgo.RecordHeader{{Key: "h"}}, Timestamp: time.UnixMilli(5)}
	e.forward(context.Background(), in, 0, false)
	if got := *outs[0]; got.Key != nil || got.Value != nil || got.Headers != nil || got.Topic != "" || !got.Timestamp.IsZero() {
		t.Fatalf("after its promise the output record still holds %+v", got)
	}
}

// pointerSession keeps the records produced themselves and answers every
// promise at once, successfully.
type pointerSession struct {
	session
	failed failures
	keep   *[]*kgo.Record
}

func (s *pointerSession) counted(p func(*kgo.Record, error)) countedPromise { return s.failed.wrap(p) }

func (s *pointerSession) produce(_ context.Context, r *kgo.Record, p countedPromise) {
	*s.keep = append(*s.keep, r)
	p.fn(r, nil)
}

// discardSession answers every promise at once, giving each record the
// next output offset as a broker would, and keeps nothing: what
// forwarding costs the signals loop, without a broker.
type discardSession struct {
	session
	failed failures
	offset int64
}

func (s *discardSession) counted(p func(*kgo.Record, error)) countedPromise { return s.failed.wrap(p) }

func (s *discardSession) produce(_ context.Context, r *kgo.Record, p countedPromise) {
	r.Offset = s.offset
	s.offset++
	p.fn(r, nil)
}

// BenchmarkForward: one forwarded signal's output record, produced and
// acknowledged (go test -bench Forward -benchmem ./pkg/fanout).
func BenchmarkForward(b *testing.B) {
	m, err := newMetrics(prometheus.NewRegistry(), gauges{})
	if err != nil {
		b.Fatal(err)
	}
	set := topics.Set{Commands: "c", Signals: "s", Cohort: "out", DLQ: "dlq", Changelog: "cl"}
	e := newEmitter(&discardSession{}, set, limits{}, nil, &refusals{}, m, m.routes([]string{"s"}), *(&EventListener{}).EnsureDefaults(), func(error) {})
	in := &kgo.Record{Topic: "s", Key: []byte("42"), Value: make([]byte, 100), Offset: 1}
	ctx := context.Background()
	b.ReportAllocs()
	for b.Loop() {
		e.forward(ctx, in, 0, false)
	}
}
