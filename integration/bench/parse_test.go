package main

import (
	"strings"
	"testing"
	"time"
)

func TestParseGateResults(t *testing.T) {
	out := `goos: linux
goarch: amd64
pkg: github.com/cohortgate/cohortgate/pkg/gate
cpu: AMD EPYC
BenchmarkAllows/members=1M/keys=absent/impl=gate/serial-2         	254072430	         4.711 ns/op	         0.4500 filter-fp-%	       0 B/op	       0 allocs/op
BenchmarkAllows/members=1M/keys=absent/impl=xsync/serial
    gate_bench_test.go:104: fixture of 1000000 members built in 1.2s
BenchmarkAllows/members=1M/keys=absent/impl=xsync/serial-2        	14803790	        80.12 ns/op	       0 B/op	       0 allocs/op
BenchmarkBuild/impl=gate/capacity/members=10M-2   	       1	2012345678 ns/op	        24.00 B/member	  4969000 members/s
PASS
ok  	github.com/cohortgate/cohortgate/pkg/gate	50.1s
`
	g, err := parseGateResults(strings.NewReader(out))
	if err != nil {
		t.Fatal(err)
	}
	if g.CPU != "AMD EPYC" || len(g.Benches) != 3 {
		t.Fatalf("got cpu %q and %d benches, want AMD EPYC and 3", g.CPU, len(g.Benches))
	}
	b := g.Benches[0]
	if b.Name != "Allows/members=1M/keys=absent/impl=gate/serial" || b.Iterations != 254072430 {
		t.Fatalf("first bench = %+v", b)
	}
	if v, ok := b.metric("ns/op"); !ok || v != 4.711 {
		t.Fatalf("ns/op = %v, %v", v, ok)
	}
	if v, ok := b.metric("filter-fp-%"); !ok || v != 0.45 {
		t.Fatalf("filter-fp-%% = %v, %v", v, ok)
	}
	if v, ok := g.Benches[2].metric("B/member"); !ok || v != 24 {
		t.Fatalf("B/member = %v, %v", v, ok)
	}
}

func TestParseProcessorLines(t *testing.T) {
	line := `time=2026-12-02T18:00:00.000Z level=INFO msg="restored membership state" members=1000000 episodes=1000000 took=812.5ms`
	n, took, err := parseRestoreLine(line)
	if err != nil || n != 1_000_000 || took != 812500*time.Microsecond {
		t.Fatalf("parseRestoreLine = %d, %v, %v", n, took, err)
	}
	if !restoredLine.MatchString(line) {
		t.Fatal("restoredLine does not match")
	}
	line = `time=2026-12-02T18:00:00.000Z level=INFO msg="partition caught up with its commands; forwarding" partition=0 next_command_offset=200000 took=3.25s`
	next, took, err := parseCaughtUpLine(line)
	if err != nil || next != 200000 || took != 3250*time.Millisecond {
		t.Fatalf("parseCaughtUpLine = %d, %v, %v", next, took, err)
	}
	if !caughtUpLine.MatchString(line) {
		t.Fatal("caughtUpLine does not match")
	}
	if _, _, err := parseRestoreLine(`msg="restored membership state"`); err == nil {
		t.Fatal("a line without figures: want an error")
	}
}

func TestThousands(t *testing.T) {
	for f, want := range map[float64]string{0: "0", 999: "999", 1000: "1,000", 1234567.4: "1,234,567", -4200: "-4,200"} {
		if got := thousands(f); got != want {
			t.Errorf("thousands(%v) = %q, want %q", f, got, want)
		}
	}
}

func TestParseCycles(t *testing.T) {
	text := `# HELP cohortgate_transactions_total Processing cycles ended, by outcome (commit, abort, unknown).
# TYPE cohortgate_transactions_total counter
cohortgate_transactions_total{outcome="abort"} 2
cohortgate_transactions_total{outcome="commit"} 1.5e+06
cohortgate_transactions_totally_else 99
bench_passthrough_cycles_total 10
bench_passthrough_end_seconds_total 0.25
`
	c, err := parseCycles(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if c.cycles != 1_500_012 || c.endSeconds != 0.25 {
		t.Fatalf("parseCycles = %+v", c)
	}
}
