package integration

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/pkg/fanout"
	"github.com/cohortgate/cohortgate/topics"
)

// gaugeOf returns the value of the gauge name with exactly the labels
// of match, and whether it is exported.
func gaugeOf(t *testing.T, g prometheus.Gatherer, name string, match map[string]string) (float64, bool) {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	metrics:
		for _, m := range f.GetMetric() {
			if len(m.GetLabel()) != len(match) {
				continue
			}
			for _, l := range m.GetLabel() {
				if match[l.GetName()] != l.GetValue() {
					continue metrics
				}
			}
			return m.GetGauge().GetValue(), true
		}
	}
	return 0, false
}

// TestIdleLagIsZero: an input partition whose last records were written in
// a transaction ends with the transaction's marker, a control record no
// consumer is given. Once the processor has consumed every signal and the
// partition is idle, its consumer lag reads 0, not the marker's 1; a
// signal written without a transaction after it keeps it at 0.
func TestIdleLagIsZero(t *testing.T) {
	e := newEnv(t, 1)
	pr := e.start(t.TempDir(), e.config())
	pr.waitReady(t, 1)
	ctx := e.ctx(30 * time.Second)
	txn, err := kgo.NewClient(kgo.SeedBrokers(broker.addrs...), kgo.TransactionalID("it-lag-"+randomID()))
	if err != nil {
		t.Fatal(err)
	}
	defer txn.Close()
	if err := txn.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	for i := range 3 {
		r := &kgo.Record{Topic: string(e.set.Signals), Key: topics.AppendUserID(nil, uint64(10+i)), Value: []byte("s"), Timestamp: now}
		if err := txn.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if err := txn.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	e.waitDecided()
	labels := map[string]string{"route": string(e.set.Signals), "partition": "0"}
	wantZero := func() error {
		lag, ok := gaugeOf(t, pr.reg, fanout.MetricConsumerLag, labels)
		switch {
		case !ok:
			return fmt.Errorf("%s%v not exported", fanout.MetricConsumerLag, labels)
		case lag != 0:
			return fmt.Errorf("%s%v = %v on an idle, caught-up partition, want 0", fanout.MetricConsumerLag, labels, lag)
		}
		return nil
	}
	eventually(t, 15*time.Second, wantZero)

	e.signal(20, time.Now(), "plain")
	e.waitDecided()
	eventually(t, 15*time.Second, wantZero)
}
