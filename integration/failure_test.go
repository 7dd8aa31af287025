package integration

import (
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/pkg/fanout"
	"github.com/cohortgate/cohortgate/topics"
)

// metricValue sums the samples of a family whose labels include every
// name=value pair of match.
func metricValue(t *testing.T, g prometheus.Gatherer, name string, match map[string]string) float64 {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metrics:
		for _, m := range f.GetMetric() {
			labels := make(map[string]string)
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			for k, v := range match {
				if labels[k] != v {
					continue metrics
				}
			}
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	return sum
}

// TestProduceFailureAbortsCycle makes every forward of three signals fail
// (the cohort topic is lowered, behind the processor's back, to refuse
// records over 1000 bytes; the signals are larger) and checks that the
// processor neither commits the cycle their output failed in nor loses
// them: franz-go's GroupTransactSession alone would commit a transaction
// whose produces all failed, and the signals would be gone. Refused for
// their size, they are produced again alone and then go to the DLQ as
// record_too_large, and the partition moves on (as TestPoisonRecords
// and TestBrokerRefusals check for every kind of poison);
// the signals before them are forwarded exactly once.
func TestProduceFailureAbortsCycle(t *testing.T) {
	for _, exactlyOnce := range []bool{true, false} {
		t.Run(fmt.Sprintf("exactly_once=%v", exactlyOnce), func(t *testing.T) {
			e := newEnv(t, 1)
			cfg := e.config()
			cfg.ExactlyOnce = exactlyOnce
			pr := e.start(t.TempDir(), cfg)
			pr.waitReady(t, 1)
			t0 := base()
			want := e.produceSignals(t0, []sig{{1, 1 * time.Millisecond, true}, {2, 2 * time.Millisecond, true}})
			e.waitDecided()

			// Not smaller: Kafka must still fit its transaction markers
			// (about 80 bytes) into the topic, or the transaction hangs.
			e.limitCohort(1000)
			var big []*kgo.Record
			for _, user := range []uint64{3, 4, 5} {
				// Random, so that compression cannot bring it under the limit.
				var pad strings.Builder
				for range 300 {
					pad.WriteString(randomID())
				}
				big = append(big, e.signal(user, t0.Add(time.Duration(user)*time.Millisecond), fmt.Sprintf("big-%d-%s", user, pad.String())))
			}
			e.waitDecided()
			if n := metricValue(t, pr.reg, fanout.MetricProduceErrors, nil); n < 1 {
				t.Errorf("%v produce errors, want at least one", n)
			}
			if n := metricValue(t, pr.reg, fanout.MetricTransactions, map[string]string{"outcome": "abort"}); n < 1 {
				t.Errorf("%v aborted cycles, want at least one", n)
			}
			if got := e.forwardedValues(); !slices.Equal(got, want) {
				t.Fatalf("forwarded %v, want each of %v once", shorten(got), shorten(want))
			}
			dlq := e.readAll(e.set.DLQ)
			for _, r := range big {
				if dl := findDLQ(dlq, r); header(dl, topics.HeaderReason) != string(topics.ReasonRecordTooLarge) {
					t.Errorf("signal at offset %d: DLQ reason %q, want %s", r.Offset, header(dl, topics.HeaderReason), topics.ReasonRecordTooLarge)
				}
			}
		})
	}
}

// limitCohort sets the cohort topic's max.message.bytes and waits until
// the broker refuses a record above it.
func (e *env) limitCohort(limit int) {
	e.t.Helper()
	c := kadm.AlterConfig{Op: kadm.SetConfig, Name: "max.message.bytes", Value: kadm.StringPtr(strconv.Itoa(limit))}
	resp, err := e.adm.AlterTopicConfigs(e.ctx(30*time.Second), []kadm.AlterConfig{c}, string(e.set.Cohort))
	if err == nil {
		err = resp[0].Err
	}
	if err != nil {
		e.t.Fatalf("alter %s: %v", e.set.Cohort, err)
	}
	e.waitRefusedAbove(e.set.Cohort, limit)
}

// waitRefusedAbove waits until the broker refuses a record of topic
// larger than limit bytes. Apache Kafka answers AlterConfigs once its
// controller has the new value, and its brokers apply it to their logs
// a moment later: records produced in between pass the old limit. Each
// probe is produced in a transaction that is then aborted, so no reader
// of committed records sees it.
func (e *env) waitRefusedAbove(topic topics.Topic, limit int) {
	e.t.Helper()
	ctx := e.ctx(30 * time.Second)
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker.addrs...), kgo.TransactionalID("it-probe-"+randomID()),
		kgo.ProducerBatchMaxBytes(int32(2*limit+1024)))
	if err != nil {
		e.t.Fatal(err)
	}
	defer cl.Close()
	value := make([]byte, limit) // random: compression cannot bring it under the limit
	eventually(e.t, 30*time.Second, func() error {
		_, _ = rand.Read(value)
		if err := cl.BeginTransaction(); err != nil {
			return err
		}
		err := cl.ProduceSync(ctx, &kgo.Record{Topic: string(topic), Value: value}).FirstErr()
		if end := cl.EndTransaction(ctx, kgo.TryAbort); end != nil {
			return fmt.Errorf("abort of the probe: %w", end)
		}
		switch {
		case errors.Is(err, kerr.MessageTooLarge):
			return nil
		case err == nil:
			return fmt.Errorf("a record of %d bytes still passes the limit of %d", len(value), limit)
		default:
			return err
		}
	})
}

// shorten cuts each value to 12 bytes for messages.
func shorten(vs []string) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		if len(v) > 12 {
			v = v[:12] + "…"
		}
		out[i] = v
	}
	return out
}

// TestRecreatedCommandsTopicHalts deletes and recreates the commands topic
// under a store whose checkpoints point past its new end: the processor
// must halt naming the way out, never skip to the new end.
func TestRecreatedCommandsTopicHalts(t *testing.T) {
	e := newEnv(t, 1)
	dir := t.TempDir()
	cfg := e.config()
	cfg.CreateTopics = false
	first := e.start(dir, cfg)
	first.waitReady(t, 1)
	e.command(topics.Leave, 1, base())
	e.command(topics.Leave, 2, base())
	eventually(t, 30*time.Second, func() error {
		if m, err := first.Member(2); err != nil || m.Status != "left" {
			return fmt.Errorf("leaves not applied yet: %+v %v", m, err)
		}
		return nil
	})
	if err := first.stop(t); err != nil {
		t.Fatal(err)
	}

	commands := string(e.set.Commands)
	if _, err := e.adm.DeleteTopics(e.ctx(30*time.Second), commands); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, func() error {
		_, err := e.adm.CreateTopic(e.ctx(30*time.Second), 1, 1, nil, commands)
		return err
	})
	second := e.start(dir, cfg)
	select {
	case err := <-second.done:
		second.done <- err
		// The layout recorded in the data directory names the topic's ID:
		// the halt says the topic was created again, not only that its
		// offsets went back.
		var recreated *fanout.CommandsRecreatedError
		if !errors.As(err, &recreated) || !strings.Contains(err.Error(), "empty data directory") {
			t.Fatalf("Run = %v, want a CommandsRecreatedError naming the way out", err)
		}
		t.Logf("halted with: %v", err)
	case <-time.After(90 * time.Second):
		t.Fatal("processor did not halt within 90s over a recreated commands topic")
	}
}
