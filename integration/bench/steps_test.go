package main

import (
	"math"
	"strings"
	"testing"
)

func TestParseHistogramsAndQuantiles(t *testing.T) {
	read := func(text string) map[string]histogram {
		t.Helper()
		h, err := parseHistograms(strings.NewReader(text))
		if err != nil {
			t.Fatal(err)
		}
		return h
	}
	before := read(`# HELP cohortgate_commands_batch_step_seconds x
cohortgate_commands_batch_step_seconds_bucket{step="commit",le="0.001"} 1
cohortgate_commands_batch_step_seconds_bucket{step="commit",le="0.002"} 1
cohortgate_commands_batch_step_seconds_bucket{step="commit",le="0.004"} 1
cohortgate_commands_batch_step_seconds_bucket{step="commit",le="+Inf"} 1
cohortgate_commands_batch_step_seconds_sum{step="commit"} 0.0005
cohortgate_commands_batch_step_seconds_count{step="commit"} 1
cohortgate_transactions_total{outcome="commit"} 3
`)
	after := read(`cohortgate_commands_batch_step_seconds_bucket{step="commit",le="0.001"} 1
cohortgate_commands_batch_step_seconds_bucket{step="commit",le="0.002"} 51
cohortgate_commands_batch_step_seconds_bucket{step="commit",le="0.004"} 101
cohortgate_commands_batch_step_seconds_bucket{step="commit",le="+Inf"} 101
cohortgate_commands_batch_step_seconds_sum{step="commit"} 0.2505
cohortgate_commands_batch_step_seconds_count{step="commit"} 101
cohortgate_command_fetch_delay_seconds_bucket{le="0.001"} 0
cohortgate_command_fetch_delay_seconds_bucket{le="+Inf"} 2
cohortgate_command_fetch_delay_seconds_sum 4
cohortgate_command_fetch_delay_seconds_count 2
go_sched_latencies_seconds_bucket{le="0.0009175039999999999"} 90
go_sched_latencies_seconds_bucket{le="0.010485759999999998"} 100
go_sched_latencies_seconds_bucket{le="+Inf"} 100
go_sched_latencies_seconds_sum 0.1
go_sched_latencies_seconds_count 100
go_gc_duration_seconds_count 7
`)
	if len(after) != 3 {
		t.Fatalf("read %d series, want the three histograms: %v", len(after), after)
	}
	if g := after[goSchedLatencies]; g.count != 100 || len(g.le) != 3 {
		t.Errorf("the Go scheduler's latencies read as %+v", g)
	}
	d := after["cohortgate_commands_batch_step_seconds{commit}"].minus(before["cohortgate_commands_batch_step_seconds{commit}"])
	if d.count != 100 || math.Abs(d.mean()-0.0025) > 1e-12 {
		t.Errorf("count %v mean %v, want 100 and 0.0025", d.count, d.mean())
	}
	// Half the hundred in (1ms, 2ms], half in (2ms, 4ms].
	if q := d.quantile(0.5); math.Abs(q-0.002) > 1e-12 {
		t.Errorf("p50 = %v, want 0.002", q)
	}
	if q := d.quantile(0.99); math.Abs(q-0.00396) > 1e-12 {
		t.Errorf("p99 = %v, want 0.00396", q)
	}
	// Above every finite bound: the highest finite bound.
	if q := after["cohortgate_command_fetch_delay_seconds"].quantile(0.99); q != 0.001 {
		t.Errorf("p99 in +Inf = %v, want 0.001", q)
	}
	figs := stepsBetween(before, after)
	if len(figs) != len(stepSeries()) || figs[0].Count != 2 || !math.IsNaN(figs[1].Mean) {
		t.Errorf("stepsBetween = %+v", figs)
	}
}

// TestHistogramPlus: the rounds' histograms add up bucket by bucket, and
// a round that read none adds nothing.
func TestHistogramPlus(t *testing.T) {
	a := histogram{le: []float64{0.001, math.Inf(1)}, cum: []float64{1, 2}, sum: 0.5, count: 2}
	b := histogram{le: []float64{0.001, math.Inf(1)}, cum: []float64{3, 3}, sum: 0.003, count: 3}
	got := a.plus(b)
	if got.count != 5 || got.cum[0] != 4 || got.cum[1] != 5 || math.Abs(got.sum-0.503) > 1e-12 {
		t.Fatalf("a+b = %+v", got)
	}
	if a.cum[0] != 1 {
		t.Fatalf("plus changed its receiver: %+v", a)
	}
	if got := (histogram{}).plus(b); got.count != 3 || got.cum[0] != 3 {
		t.Fatalf("0+b = %+v", got)
	}
}
