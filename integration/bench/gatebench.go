package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"
)

// gateBench is one result line of `go test -bench`.
type gateBench struct {
	Name       string // without the Benchmark prefix and the -GOMAXPROCS suffix
	Iterations int64
	Metrics    []metric // in the order printed: ns/op first
}

// metric is one "value unit" pair of a benchmark line.
type metric struct {
	Value float64
	Unit  string
}

// gateResults are the benchmark lines of a `go test -bench` output, the
// cpu line of its header and how long the package's run took (its "ok"
// line; 0 if absent).
type gateResults struct {
	CPU     string
	Took    time.Duration
	Benches []gateBench
}

func readGateResults(path string) (*gateResults, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return parseGateResults(f)
}

// parseGateResults reads `go test -bench` output: lines
//
//	BenchmarkName/sub-8   1000   12.5 ns/op   0 B/op   3.5 custom-unit
//
// the "cpu: ..." header line and the closing "ok <package> <duration>"
// line; everything else is skipped.
func parseGateResults(r io.Reader) (*gateResults, error) {
	out := &gateResults{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if cpu, ok := strings.CutPrefix(line, "cpu: "); ok {
			out.CPU = strings.TrimSpace(cpu)
			continue
		}
		if f := strings.Fields(line); len(f) == 3 && f[0] == "ok" {
			if d, err := time.ParseDuration(f[2]); err == nil {
				out.Took += d
			}
			continue
		}
		if !strings.HasPrefix(line, "Benchmark") {
			continue
		}
		b, ok, err := parseBenchLine(line)
		if err != nil {
			return nil, err
		}
		if ok {
			out.Benches = append(out.Benches, b)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// parseBenchLine parses one result line. ok is false for a line that
// starts with Benchmark but is no result (a benchmark's name printed alone
// before its log output).
func parseBenchLine(line string) (b gateBench, ok bool, err error) {
	f := strings.Fields(line)
	if len(f) < 4 || len(f)%2 != 0 {
		return b, false, nil
	}
	n, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return b, false, nil
	}
	name := strings.TrimPrefix(f[0], "Benchmark")
	if i := strings.LastIndexByte(name, '-'); i > 0 {
		if _, err := strconv.Atoi(name[i+1:]); err == nil {
			name = name[:i]
		}
	}
	b = gateBench{Name: name, Iterations: n}
	for i := 2; i+1 < len(f); i += 2 {
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil {
			return b, false, fmt.Errorf("benchmark line %q: value %q: %w", line, f[i], err)
		}
		b.Metrics = append(b.Metrics, metric{Value: v, Unit: f[i+1]})
	}
	return b, true, nil
}

// metric returns the value of unit, if the line has it.
func (b gateBench) metric(unit string) (float64, bool) {
	for _, m := range b.Metrics {
		if m.Unit == unit {
			return m.Value, true
		}
	}
	return 0, false
}
