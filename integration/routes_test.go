package integration

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/pkg/fanout"
	"github.com/cohortgate/cohortgate/topics"
)

// routesEnv is an env with a second route, attribution events into their
// own output, beside signals into the cohort topic.
func routesEnv(t *testing.T, parts int32) *env {
	t.Helper()
	e := bareEnv(t, parts)
	e.set.Routes = []topics.Route{{In: e.set.Signals + "-attribution", Out: e.set.Cohort + "-attribution"}}
	e.createTopics(parts, parts)
	return e
}

// routed is a signal of one route.
type routed struct {
	route int // index in AllRoutes
	sig
}

func (r routed) value() string { return fmt.Sprintf("r%d:%s", r.route, r.sig.value()) }

// produceRouted produces sigs to their routes' inputs and returns, per
// route, the values that must come out of its output, sorted.
func (e *env) produceRouted(t0 time.Time, sigs []routed) [][]string {
	routes := e.set.AllRoutes()
	want := make([][]string, len(routes))
	var rs []*kgo.Record
	for _, s := range sigs {
		rs = append(rs, &kgo.Record{Topic: string(routes[s.route].In), Key: topics.AppendUserID(nil, s.user),
			Value: []byte(s.value()), Timestamp: t0.Add(s.at)})
		if s.forward {
			want[s.route] = append(want[s.route], s.value())
		}
	}
	e.produce(rs...)
	for _, w := range want {
		slices.Sort(w)
	}
	return want
}

// routedValues returns, per route, the values on its output, sorted.
func (e *env) routedValues() [][]string {
	var got [][]string
	for _, r := range e.set.AllRoutes() {
		var vs []string
		for _, rec := range e.readAll(r.Out) {
			vs = append(vs, string(rec.Value))
		}
		slices.Sort(vs)
		got = append(got, vs)
	}
	return got
}

// TestOneLeaveGatesEveryRoute runs two routes through one processor, then
// two in one group (a rebalance), then one again: a leave stops its user's
// signals on both routes at the same boundary, a rejoin resumes both, each
// route's signals go to its own output once, a partition number is owned
// on both inputs by one instance, and receipts carry both inputs' offsets.
func TestOneLeaveGatesEveryRoute(t *testing.T) {
	const parts = 4
	e := routesEnv(t, parts)
	cfgA, cfgB := e.config(), e.config()
	cfgB.TransactionalID = cfgA.TransactionalID + "-b"
	cfgA.SessionTimeout, cfgB.SessionTimeout = 6*time.Second, 6*time.Second
	a := e.start(t.TempDir(), cfgA)
	a.waitReady(t, parts)

	t0 := base()
	var leavers []uint64 // one per partition
	for u := uint64(1); len(leavers) < parts && u < 1000; u++ {
		if int(murmur2Partition(topics.AppendUserID(nil, u), parts)) == len(leavers) {
			leavers = append(leavers, u)
		}
	}
	for _, u := range leavers {
		e.command(topics.Leave, u, t0.Add(10*time.Second))
	}
	waitApplied(t, "left", 0, leavers, a)
	// Both routes, either side of the boundary, and a user who stays.
	phase := func(at time.Duration) []routed {
		var sigs []routed
		for route := range 2 {
			for _, u := range leavers {
				sigs = append(sigs,
					routed{route, sig{u, 9 * time.Second, at == 0}}, // before the boundary: forwarded (once, in the first phase)
					routed{route, sig{u, at + 11*time.Second, false}},
					routed{route, sig{u + 1000, at + 11*time.Second, true}})
			}
		}
		if at != 0 { // the signals before the boundary went in the first phase
			sigs = slices.DeleteFunc(sigs, func(s routed) bool { return s.at == 9*time.Second })
		}
		return sigs
	}
	want := e.produceRouted(t0, phase(0))
	e.waitDecided()

	// A second instance joins: partition numbers split between the two,
	// each owned on both inputs by one of them (the balancer).
	b := e.start(t.TempDir(), cfgB)
	eventually(t, 90*time.Second, func() error {
		pa, pb := owned(a), owned(b)
		if len(pa)+len(pb) != parts || len(pa) == 0 || len(pb) == 0 {
			return fmt.Errorf("a owns %v, b owns %v", pa, pb)
		}
		for _, pr := range []*proc{a, b} {
			if ok, why := pr.Ready(); !ok {
				return errors.New(why)
			}
		}
		return nil
	})
	for _, pr := range []*proc{a, b} {
		for _, st := range pr.Partitions() {
			if len(st.Inputs) != 2 || st.Inputs[0].Topic != string(e.set.Signals) || st.Inputs[1].Topic != string(e.set.Routes[0].In) {
				t.Errorf("partition %d shows inputs %+v, want both routes' in order", st.Partition, st.Inputs)
			}
		}
	}
	assigned, err := e.adm.DescribeGroups(e.ctx(30*time.Second), e.group)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range assigned {
		for _, m := range g.Members {
			ma, _ := m.Assigned.AsConsumer()
			byTopic := make(map[string][]int32)
			for _, tp := range ma.Topics {
				byTopic[tp.Topic] = slices.Sorted(slices.Values(tp.Partitions))
			}
			if in0, in1 := byTopic[string(e.set.Signals)], byTopic[string(e.set.Routes[0].In)]; !slices.Equal(in0, in1) {
				t.Errorf("member %s is assigned %v of %s but %v of %s", m.MemberID, in0, e.set.Signals, in1, e.set.Routes[0].In)
			}
		}
	}
	more := e.produceRouted(t0, phase(20*time.Second))
	e.waitDecided()

	// One leaver rejoins at t0+40s: both routes resume for it.
	back := leavers[0]
	e.command(topics.Rejoin, back, t0.Add(40*time.Second))
	waitApplied(t, "active", 1, []uint64{back}, a, b)
	after := e.produceRouted(t0, []routed{
		{0, sig{back, 41 * time.Second, true}}, {1, sig{back, 41 * time.Second, true}},
		{0, sig{leavers[1], 41 * time.Second, false}}, {1, sig{leavers[1], 41 * time.Second, false}},
	})

	// B goes; A takes every partition over on both inputs.
	if err := b.stop(t); err != nil {
		t.Fatalf("b: %v", err)
	}
	a.waitReady(t, parts)
	final := phase(50 * time.Second)
	for i := range final {
		final[i].forward = final[i].forward || final[i].user == back // rejoined at 40s
	}
	last := e.produceRouted(t0, final)
	e.waitDecided()

	for route := range 2 {
		w := slices.Concat(want[route], more[route], after[route], last[route])
		slices.Sort(w)
		if got := e.routedValues()[route]; !slices.Equal(got, w) {
			t.Errorf("route %d (%s) forwarded\n %v\nwant each once\n %v", route, e.set.AllRoutes()[route], got, w)
		}
	}

	// Receipts say from which offset of each input the command held.
	for _, r := range e.readAll(e.set.Changelog) {
		rec, err := topics.DecodeMemberRecord(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		rc := rec.Receipt
		if rc == nil || len(rc.Inputs) != 2 || rc.Inputs[0].Topic != string(e.set.Signals) ||
			rc.Inputs[1].Topic != string(e.set.Routes[0].In) || rc.Inputs[0].Offset != rc.SignalsOffset {
			t.Errorf("user %d: receipt %+v, want the offsets of both inputs, the first the signals offset", rec.UserID, rc)
		}
	}
	for route, r := range e.set.AllRoutes() {
		if n := metricValue(t, a.reg, fanout.MetricForwarded, map[string]string{"route": string(r.In)}); n == 0 {
			t.Errorf("%s{route=%q} is 0 after forwarding on route %d", fanout.MetricForwarded, r.In, route)
		}
	}
}

// TestRoutesChangeRefusedNotStalled: a rolling deploy that adds a route
// starts an instance with three routes in a group whose running instance
// has two. Kafka must refuse the new instance at once (it halts, saying
// the routes differ) while the running one keeps every partition and goes
// on forwarding.
func TestRoutesChangeRefusedNotStalled(t *testing.T) {
	const parts = 2
	e := routesEnv(t, parts)
	a := e.start(t.TempDir(), e.config())
	a.waitReady(t, parts)

	cfg := e.config()
	cfg.Topics.Routes = append(slices.Clone(cfg.Topics.Routes),
		topics.Route{In: e.set.Signals + "-clicks", Out: e.set.Cohort + "-clicks"})
	b := e.start(t.TempDir(), cfg)
	var err error
	select {
	case err = <-b.done:
	case <-time.After(60 * time.Second):
		t.Fatal("the instance with other routes did not halt within 60s")
	}
	b.done <- err // for its stop at cleanup
	var differ *fanout.RoutesDifferError
	if !errors.As(err, &differ) || !strings.Contains(err.Error(), "same routes") {
		t.Fatalf("the instance with other routes ended with %v, want a RoutesDifferError saying the group needs the same routes", err)
	}

	// The running instance kept its partitions and forwards on every route.
	t0 := time.Now()
	want := e.produceRouted(t0, []routed{{0, sig{user: 1, at: 0, forward: true}}, {1, sig{user: 2, at: 0, forward: true}}})
	eventually(t, 30*time.Second, func() error {
		if ok, why := a.Ready(); !ok || len(a.Partitions()) != parts {
			return fmt.Errorf("the running instance: ready %v (%s), owns %d partitions", ok, why, len(a.Partitions()))
		}
		if got := e.routedValues(); !slices.Equal(got[0], want[0]) || !slices.Equal(got[1], want[1]) {
			return fmt.Errorf("forwarded %v, want %v", got, want)
		}
		return nil
	})
}
