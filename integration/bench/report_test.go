package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestTargets(t *testing.T) {
	r := &results{
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
}

// rounds makes one throughput result per (run, round, CPU-s per million
// signals, signals/s), a million signals each.
func rounds(rows ...struct {
	name      string
	round     int
	cpu, rate float64
}) []throughputResult {
	var out []throughputResult
	for _, r := range rows {
		out = append(out, throughputResult{Name: r.name, Round: r.round, InSignal: 1_000_000, CPUWindow: r.cpu,
			Rate: r.rate, Window: time.Duration(1e6 / r.rate * float64(time.Second))})
	}
	return out
}

type row = struct {
	name      string
	round     int
	cpu, rate float64
}

func TestRatiosPairRoundsAndTheWorstDecides(t *testing.T) {
	r := &results{Throughput: rounds(
		row{runProcessorEOS, 1, 1.0, 1_000_000}, row{runPassthroughEOS, 1, 1.0, 1_000_000}, // 1.00
		row{runProcessorEOS, 2, 1.2, 800_000}, row{runPassthroughEOS, 2, 1.0, 1_000_000}, // 1.20: the worst
		row{runProcessorEOS, 3, 1.05, 900_000}, row{runPassthroughEOS, 3, 1.0, 1_000_000}, // 1.05
		row{runStreamsGrace, 1, 12, 100_000}, row{runStreamsGrace, 2, 13, 90_000}, row{runStreamsGrace, 3, 20, 80_000},
	)}
	r.Throughput = append(r.Throughput, throughputResult{Name: runStreamsGrace, Round: 4, Err: "exited"})
	got := make(map[string]ratioResult)
	for _, x := range r.ratios() {
		got[x.Label] = x
	}
	over := got["processor-eos / passthrough-eos"]
	if over.CPU.N != 3 || over.CPU.Median != 1.05 || over.CPU.Min != 1.0 || over.CPU.Max != 1.2 {
		t.Errorf("overhead spread = %+v, want median 1.05 [1.00 – 1.20] of 3", over.CPU)
	}
	if over.Worst != 1.2 || over.Met != "no" {
		t.Errorf("overhead worst %v met %q, want 1.2 and no: the median meets ≤ 1.10, the worst round does not", over.Worst, over.Met)
	}
	peer := got["streams-grace / processor-eos"]
	// Per round: 12/1.0, 13/1.2, 20/1.05; the worst (smallest) is 10.83.
	if peer.Met != "yes" || peer.Worst < 10.8 || peer.Worst > 10.9 {
		t.Errorf("peer worst %v met %q, want 10.83 and yes", peer.Worst, peer.Met)
	}
	if _, ok := got["streams / processor-eos"]; ok {
		t.Error("a ratio of a run that was not done is reported")
	}
	sums := r.summaries()
	for _, s := range sums {
		if s.Name == runStreamsGrace && (s.Failed != 1 || s.CPU.N != 3 || s.CPU.Median != 13) {
			t.Errorf("streams-grace summary = %+v, want 1 failed and a median of 13 over 3", s)
		}
	}
}

func TestSpreadOfAnEvenCount(t *testing.T) {
	if s := spreadOf([]float64{4, 1, 3, 2}); s.Median != 2.5 || s.Min != 1 || s.Max != 4 || s.N != 4 {
		t.Fatalf("spreadOf = %+v", s)
	}
}

func TestReportSectionIsShortAndTheTrendRowLands(t *testing.T) {
	var rows []row
	for round := 1; round <= 3; round++ {
		for _, name := range allRuns {
			rows = append(rows, row{name, round, float64(round), 1_000_000})
		}
	}
	r := &results{Throughput: rounds(rows...)}
	r.Throughput = append(r.Throughput, throughputResult{Name: "broken", Round: 1, Err: "exited"})
	r.Load.Signals = 3_000_000
	o := &runOptions{rounds: 3}
	md := r.markdown(o, "bin/bench-work/x/report.md")
	if n := strings.Count(md, "\n"); n > 80 {
		t.Errorf("the section has %d lines, want at most 80:\n%s", n, md)
	}
	for _, line := range []string{
		"| processor-eos | 2.00 [1.00 – 3.00] | 1,000,000 [1,000,000 – 1,000,000] |",
		"| processor-eos / passthrough-eos | 1.00 [1.00 – 1.00] |",
	} {
		if !strings.Contains(md, line) {
			t.Errorf("the report lacks %q:\n%s", line, md)
		}
	}
	path := filepath.Join(t.TempDir(), "BENCHMARKS.md")
	before := "# Benchmarks\n\n| a |\n|---|\n| old |\n" + trendMarker + "\n\n## old run\n"
	if err := os.WriteFile(path, []byte(before), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := appendReport(path, md, "| new |"); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := "| old |\n| new |\n" + trendMarker + "\n\n## old run\n\n" + md
	if !strings.HasSuffix(string(b), want) {
		t.Errorf("BENCHMARKS.md after the run:\n%s\nwant it to end with:\n%s", b, want)
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

func TestFloorAim(t *testing.T) {
	ms := func(n float64) time.Duration { return time.Duration(n * float64(time.Millisecond)) }
	round := func(p99, floor float64) latencyRound {
		return latencyRound{Latency: summary{N: 10, P99: ms(p99)}, Floor: summary{N: 10, P99: ms(floor)}}
	}
	for _, tc := range []struct {
		name   string
		rounds []latencyRound
		worst  time.Duration
		met    bool
		ok     bool
	}{
		{"within 2 ms of the floor", []latencyRound{round(5, 4), round(6.5, 4.6)}, ms(1.9), true, true},
		{"one round above", []latencyRound{round(5, 4), round(9, 4)}, ms(5), false, true},
		{"no floor measured", []latencyRound{{Latency: summary{N: 3, P99: ms(4)}}}, 0, false, false},
	} {
		l := &latencyResult{Rounds: tc.rounds}
		worst, met, ok := l.floorAim()
		if worst.Round(time.Microsecond) != tc.worst || met != tc.met || ok != tc.ok {
			t.Errorf("%s: floorAim = %v, %v, %v; want %v, %v, %v", tc.name, worst, met, ok, tc.worst, tc.met, tc.ok)
		}
	}
}
