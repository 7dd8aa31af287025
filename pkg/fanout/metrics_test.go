package fanout

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestStepTimer: each lap is observed as its step, the fetch delay once per
// record with the time since its timestamp, and the zero timer (the
// applier's in tests) observes nothing and does not panic.
func TestStepTimer(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := newMetrics(reg, gauges{})
	if err != nil {
		t.Fatal(err)
	}
	fetched := []kgo.FetchTopicPartition{{FetchPartition: kgo.FetchPartition{Records: []*kgo.Record{
		{Timestamp: time.Now().Add(-time.Second)}, {Timestamp: time.Now().Add(time.Hour)}, // ahead: 0
	}}}}
	var zero stepTimer
	zero.start()
	zero.lap(stepCommit)
	zero.fetched(fetched)

	st := m.stepTimer()
	st.start()
	st.lap(stepWait)
	st.fetched(fetched)
	st.lap(stepApply)
	st.lap(stepApply)

	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	counts := map[string]uint64{}
	var delay *dto.Histogram
	for _, f := range families {
		for _, mt := range f.GetMetric() {
			switch f.GetName() {
			case MetricBatchStep:
				counts[mt.GetLabel()[0].GetValue()] = mt.GetHistogram().GetSampleCount()
			case MetricFetchDelay:
				delay = mt.GetHistogram()
			}
		}
	}
	want := map[string]uint64{"wait": 1, "recover": 0, "apply": 2, "gate": 0, "settle": 0, "commit": 0, "sync": 0}
	for step, n := range want {
		if counts[step] != n {
			t.Errorf("step %s observed %d times, want %d (all: %v)", step, counts[step], n, counts)
		}
	}
	if delay.GetSampleCount() != 2 || delay.GetSampleSum() < 1 || delay.GetSampleSum() > 2 {
		t.Errorf("fetch delay: %d samples summing to %vs, want 2 summing to about 1s", delay.GetSampleCount(), delay.GetSampleSum())
	}
}
