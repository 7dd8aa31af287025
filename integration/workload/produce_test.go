package workload

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/integration/oracle"
	"github.com/cohortgate/cohortgate/topics"
)

// cluster starts an in-process kfake broker for one test.
func cluster(t *testing.T) []string {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// newSet creates a fresh set of topics named after prefix, with parts
// partitions.
func newSet(t *testing.T, brokers []string, prefix string, parts int32) topics.Set {
	t.Helper()
	set := Topics(prefix)
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	if err := CreateTopics(testCtx(t), kadm.NewClient(cl), set, parts, 1); err != nil {
		t.Fatal(err)
	}
	return set
}

func newClients(t *testing.T, brokers []string, hostile bool, txnID string) *Clients {
	t.Helper()
	c, err := NewClients(brokers, hostile, txnID)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// oracleTopics names set's topics for the oracle.
func oracleTopics(set topics.Set) oracle.Topics {
	return oracle.Topics{Commands: string(set.Commands), Signals: string(set.Signals), Cohort: string(set.Cohort),
		DLQ: string(set.DLQ), Changelog: string(set.Changelog)}
}

// TestProduceThenJudge produces a friendly plan and judges it with the
// oracle and no processor: every signal and command of the plan is in
// Kafka, the commands carry the plan's request ids, the signals a leave
// covers are marked gated (and the oracle's model agrees with every mark),
// and with an empty cohort topic every expected signal is lost.
func TestProduceThenJudge(t *testing.T) {
	brokers := cluster(t)
	set := newSet(t, brokers, "plan", 3)
	plan, err := NewPlan(Config{Seed: 9, Users: 50, Signals: 3000, ValueSize: 32, LeavePct: 20, RejoinPct: 6, Rate: 20000})
	if err != nil {
		t.Fatal(err)
	}
	var calls []Progress
	start := time.Now()
	final, err := Produce(testCtx(t), newClients(t, brokers, false, ""), set, plan, func(p Progress) { calls = append(calls, p) })
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 140*time.Millisecond {
		t.Errorf("3000 signals at 20000/s took %v", took)
	}
	if final.Phase != PhaseDone || final.Signals != 3000 || final.Acked != 3000 || final.Commands != len(plan.Commands) || final.SignalIDs() != 3000 {
		t.Fatalf("final progress %+v", final)
	}
	if len(calls) == 0 || calls[len(calls)-1] != final {
		t.Fatalf("progress calls %v, want the last to be %v", calls, final)
	}

	rep, err := oracle.Verify(testCtx(t), brokers, oracleTopics(set), &oracle.Options{Grace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if rep.SignalsIn != 3000 || rep.CommandsIn != len(plan.Commands) || rep.Applied != len(plan.Commands) || rep.Refused != 0 ||
		rep.Users != plan.Leavers() || rep.Misrouted != 0 || rep.DeadLetters != 0 {
		t.Fatalf("report %+v; plan has %d commands and %d leavers", rep, len(plan.Commands), plan.Leavers())
	}
	if rep.Expected == 0 || rep.Expected == 3000 || rep.Lost != rep.Expected || rep.Forwarded != 0 {
		t.Fatalf("report %+v", rep)
	}
	if rep.Gated == 0 || rep.Gated > 3000-rep.Expected || rep.Contradictions != 0 {
		t.Fatalf("%d signals marked gated, %d contradict the oracle; %d of 3000 held", rep.Gated, rep.Contradictions, 3000-rep.Expected)
	}
	if rep.ChangelogMismatches != plan.Leavers() { // no processor, so no changelog records
		t.Fatalf("%d changelog mismatches, want one per leaver (%d)", rep.ChangelogMismatches, plan.Leavers())
	}

	// The commands carry the plan's request ids.
	var ids []string
	cons, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumeTopics(string(set.Commands)), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	for len(ids) < len(plan.Commands) {
		fs := cons.PollFetches(testCtx(t))
		if err := fs.Err0(); err != nil {
			t.Fatal(err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			c, err := topics.DecodeCommand(r.Key, r.Value)
			if err != nil || !c.HasAt {
				t.Fatalf("command %q: %v", r.Value, err)
			}
			ids = append(ids, c.RequestID)
		})
	}
	for i := range plan.Commands {
		if !slices.Contains(ids, fmt.Sprint(i)) {
			t.Fatalf("no command with request_id %d", i)
		}
	}
}

// TestProduceFriendlyAndHostile produces both parts of a load at once: the
// scenes play during the friendly load, their signal ids follow the
// friendly ones, and the oracle finds every signal and no mark it
// disagrees with.
func TestProduceFriendlyAndHostile(t *testing.T) {
	brokers := cluster(t)
	set := newSet(t, brokers, "both", 3)
	plan, err := NewPlan(Config{Seed: 4, Users: 40, Signals: 2000, LeavePct: 25, RejoinPct: 5, Rate: 4000, Partitions: 3,
		Hostile: Hostile{Scenes: 3, Shares: Shares{KindSameMilli: 1, KindFuture: 1, KindTxnAbort: 1}, Grace: 200 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	var phases []string
	final, err := Produce(testCtx(t), newClients(t, brokers, true, "both"), set, plan, func(p Progress) {
		if len(phases) == 0 || phases[len(phases)-1] != p.Phase {
			phases = append(phases, p.Phase)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	if final.Scenes != 3 || final.Signals != 2000 || final.HostileSignals == 0 || phases[len(phases)-1] != PhaseDone {
		t.Fatalf("final %v, phases %v", final, phases)
	}
	rep, err := oracle.Verify(testCtx(t), brokers, oracleTopics(set), &oracle.Options{Grace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if rep.SignalsIn != final.SignalIDs() || rep.Contradictions != 0 || rep.Gated == 0 || rep.Applied != len(plan.Commands)+2 {
		t.Fatalf("progress %v\nreport %+v", final, rep)
	}
}

// TestProduceStopsOnHostileError: a scene that fails stops the friendly
// load too, and Produce says why.
func TestProduceStopsOnHostileError(t *testing.T) {
	brokers := cluster(t)
	set := newSet(t, brokers, "fail", 3)
	plan, err := NewPlan(Config{Seed: 4, Users: 40, Signals: 1000, Rate: 100, Partitions: 3,
		Hostile: Hostile{Scenes: 1, Shares: Shares{KindFuture: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	// No hostile clients: the scene fails at once.
	_, err = Produce(testCtx(t), newClients(t, brokers, false, ""), set, plan, nil)
	if err == nil || !strings.Contains(err.Error(), "no hostile clients") {
		t.Fatalf("Produce: %v, want the scene's error", err)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("Produce took %v to stop a 10s load", took)
	}
}
