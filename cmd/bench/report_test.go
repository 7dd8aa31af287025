package main

import (
	"strings"
	"testing"
	"time"
)

func TestTargets(t *testing.T) {
	run := func(name string, rate float64, cpu float64) throughputResult {
		return throughputResult{Name: name, Rate: rate, InSignal: 1_000_000, CPUWindow: cpu, Window: time.Second}
	}
	r := &results{
		Throughput: []throughputResult{
			run(runPassthrough, 1_000_000, 1),
			run(runProcessorALO, 950_000, 1.2),
			run(runProcessorEOS, 800_000, 1.5),
			run(runStreams, 100_000, 12),
			{Name: "broken", Err: "exited"},
		},
		Gate: &gateResults{Benches: []gateBench{
			{Name: gateAbsent10M, Metrics: []metric{{32.5, "ns/op"}}},
			{Name: gatePresent10M, Metrics: []metric{{79.9, "ns/op"}}},
		}},
		Restores: []restoreResult{
			{Members: 1_000_000, Restored: 1_000_000, Took: 100 * time.Millisecond},
			{Members: 10_000_000, Restored: 10_000_000, Took: 2500 * time.Millisecond},
		},
		Latency: &latencyResult{Found: 1000, Latency: summary{P99: 12500 * time.Microsecond}},
	}
	want := []target{
		{"b/a processor-alo / passthrough, signals/s", "≥ 0.95", "0.95", "yes"},
		{"c/a processor-eos / passthrough, signals/s", "≥ 0.90", "0.80", "no"},
		{"c/d processor-eos / streams, signals per CPU-s", "≥ 2", "8.00", "yes"},
		{"lookup of an absent user at 10M members, ns", "≤ 15", "32.5", "no"},
		{"lookup of a member at 10M members, ns", "≤ 80", "79.9", "yes"},
		{"bytes per member at 10M", "≤ 40", "–", "–"}, // not measured
		{"restore of 10,000,000 members, members/s", "≥ 5,000,000", "4,000,000", "no"},
		{"leave latency p99, ms", "≤ 20", "12.50", "yes"},
	}
	got := r.targets()
	if len(got) != len(want) {
		t.Fatalf("%d targets, want %d", len(got), len(want))
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("target %d = %+v, want %+v", i, got[i], want[i])
		}
	}

	md := r.markdown(&runOptions{})
	for _, line := range []string{
		"| b/a processor-alo / passthrough, signals/s | ≥ 0.95 | 0.95 | yes |",
		"| c/d processor-eos / streams | 8.00 | 8.00 |",
		"| broken | failed: exited |",
	} {
		if !strings.Contains(md, line) {
			t.Errorf("the report lacks %q:\n%s", line, md)
		}
	}
}

func TestTargetsOfAnEmptyRun(t *testing.T) {
	for _, tg := range (&results{}).targets() {
		if tg.Got != "–" || tg.Met != "–" {
			t.Errorf("%s: got %q, met %q; want – and –", tg.Figure, tg.Got, tg.Met)
		}
	}
}

func TestParseBenchLine(t *testing.T) {
	tests := []struct {
		name, line string
		ok, bad    bool
		want       string
	}{
		{name: "result", line: "BenchmarkX/y=1-16 \t 10 \t 5.5 ns/op \t 0 B/op", ok: true, want: "X/y=1"},
		{name: "name without a GOMAXPROCS suffix", line: "BenchmarkX/impl=a-b 10 5.5 ns/op", ok: true, want: "X/impl=a-b"},
		{name: "name alone", line: "BenchmarkX/y=1"},
		{name: "no iteration count", line: "BenchmarkX many 5 ns/op"},
		{name: "bad value", line: "BenchmarkX-2 10 fast ns/op", bad: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, ok, err := parseBenchLine(tt.line)
			if (err != nil) != tt.bad || ok != tt.ok {
				t.Fatalf("parseBenchLine = %+v, %v, %v", b, ok, err)
			}
			if ok && b.Name != tt.want {
				t.Fatalf("name %q, want %q", b.Name, tt.want)
			}
		})
	}
}

func TestMetricLine(t *testing.T) {
	tests := []struct {
		line, name string
		value      float64
		ok         bool
	}{
		{`a_total{x="1 2"} 3`, "a_total", 3, true},
		{"b 1.5e+06", "b", 1.5e6, true},
		{"# HELP b help", "", 0, false},
		{"", "", 0, false},
		{"c NaNx", "", 0, false},
	}
	for _, tt := range tests {
		name, v, ok := metricLine(tt.line)
		if name != tt.name || v != tt.value || ok != tt.ok {
			t.Errorf("metricLine(%q) = %q, %v, %v; want %q, %v, %v", tt.line, name, v, ok, tt.name, tt.value, tt.ok)
		}
	}
}

func TestWithoutFlag(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--brokers", "b", "--invoked-as", "make bench X=1", "--signals", "5"}, "--brokers b --signals 5"},
		{[]string{"-invoked-as=make bench", "--signals=5"}, "--signals=5"},
		{[]string{"--invoked-asx", "v"}, "--invoked-asx v"},
		{[]string{"--invoked-as"}, ""},
	}
	for _, tt := range tests {
		if got := joinArgs(withoutFlag(tt.args, "invoked-as")); got != tt.want {
			t.Errorf("withoutFlag(%q) = %q, want %q", tt.args, got, tt.want)
		}
	}
}

func TestGateTook(t *testing.T) {
	g, err := parseGateResults(strings.NewReader("BenchmarkA-2 10 1 ns/op\nPASS\nok  \tgithub.com/x/gate\t156.972s\n"))
	if err != nil || g.Took != 156972*time.Millisecond || len(g.Benches) != 1 {
		t.Fatalf("parseGateResults = %+v, %v", g, err)
	}
	if got := trimFloat(2.852e6); got != "2,852,000" {
		t.Errorf("trimFloat(2.852e6) = %q", got)
	}
	if got := trimFloat(28.523); got != "28.52" {
		t.Errorf("trimFloat(28.523) = %q", got)
	}
}
