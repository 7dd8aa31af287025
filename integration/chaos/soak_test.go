package main

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cohortgate/cohortgate/integration/oracle"
	"github.com/cohortgate/cohortgate/integration/workload"
)

// exposition is a trimmed /metrics of the processor, with the series the
// soak reads: the lag has one series per route and partition, and is
// summed.
const exposition = `# HELP process_resident_memory_bytes Resident memory size in bytes.
# TYPE process_resident_memory_bytes gauge
process_resident_memory_bytes 1.2582912e+08
# HELP go_memstats_heap_inuse_bytes Number of heap bytes that are in use.
# TYPE go_memstats_heap_inuse_bytes gauge
go_memstats_heap_inuse_bytes 4.194304e+07
# HELP go_goroutines Number of goroutines that currently exist.
# TYPE go_goroutines gauge
go_goroutines 38
# HELP cohortgate_gate_members Users with an entry in the in-memory gate (users who ever left).
# TYPE cohortgate_gate_members gauge
cohortgate_gate_members 515
# HELP cohortgate_held_bytes Bytes of signals fetched and waiting for a decision.
# TYPE cohortgate_held_bytes gauge
cohortgate_held_bytes 1024
# HELP cohortgate_consumer_lag_records Records between an input's high watermark and the last fetched offset.
# TYPE cohortgate_consumer_lag_records gauge
cohortgate_consumer_lag_records{partition="0",route="s"} 7
cohortgate_consumer_lag_records{partition="1",route="s"} 5
# HELP cohortgate_signals_in_total Signals fetched, by route.
# TYPE cohortgate_signals_in_total counter
cohortgate_signals_in_total{route="s"} 1000
cohortgate_signals_in_total{route="t"} 234
`

func TestParseSample(t *testing.T) {
	for _, tc := range []struct {
		name    string
		text    string
		want    [len(soakMetrics)]float64
		in      float64
		wantErr string
	}{
		{name: "every series, lag summed over partitions", text: exposition,
			want: [...]float64{120 << 20, 40 << 20, 38, 515, 1024, 12}, in: 1234},
		{name: "no lag series yet reads as 0",
			text: cut(exposition, "cohortgate_consumer_lag_records"),
			want: [...]float64{120 << 20, 40 << 20, 38, 515, 1024, 0}, in: 1234},
		{name: "a missing series is an error",
			text: cut(exposition, "go_goroutines"), wantErr: "no go_goroutines"},
		{name: "not an exposition", text: "process_resident_memory_bytes one\n", wantErr: "parsing /metrics"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := parseSample(strings.NewReader(tc.text))
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("err = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if s.values != tc.want || s.signalsIn != tc.in {
				t.Fatalf("sample = %v, %v signals in; want %v, %v", s.values, s.signalsIn, tc.want, tc.in)
			}
		})
	}
}

// cut drops the lines of text that mention series.
func cut(text, series string) string {
	var keep []string
	for _, l := range strings.Split(text, "\n") {
		if !strings.Contains(l, series) {
			keep = append(keep, l)
		}
	}
	return strings.Join(keep, "\n")
}

func TestCSVRoundTrip(t *testing.T) {
	in := []sample{
		{at: 0, values: [...]float64{1, 2, 3, 4, 5, 6}, signalsIn: 0},
		{at: 10 * time.Second, values: [...]float64{125829120, 41943040.5, 38, 515, 1024, 12}, signalsIn: 4.5e6},
	}
	var b bytes.Buffer
	if err := writeSamples(&b, in); err != nil {
		t.Fatal(err)
	}
	first := strings.SplitN(b.String(), "\n", 2)[0]
	if want := "t_seconds,rss_bytes,heap_inuse_bytes,goroutines,gate_members,held_bytes,consumer_lag_records,signals_in_total"; first != want {
		t.Fatalf("header %q, want %q", first, want)
	}
	out, err := readCSV(&b)
	if err != nil {
		t.Fatal(err)
	}
	if len(out) != len(in) {
		t.Fatalf("%d samples back, want %d", len(out), len(in))
	}
	for i := range in {
		if out[i] != in[i] {
			t.Errorf("sample %d: %+v back, want %+v", i, out[i], in[i])
		}
	}
	if _, err := readCSV(strings.NewReader("t,rss\n1,2\n")); err == nil {
		t.Error("a CSV with another header was read")
	}
}

func TestFitXY(t *testing.T) {
	for _, tc := range []struct {
		name      string
		xs, ys    []float64
		slope     float64
		seNonZero bool
	}{
		{name: "a line", xs: []float64{0, 1, 2, 3}, ys: []float64{1, 3, 5, 7}, slope: 2},
		{name: "flat", xs: []float64{0, 1, 2}, ys: []float64{4, 4, 4}, slope: 0},
		{name: "noise around a slope", xs: []float64{0, 1, 2, 3}, ys: []float64{0, 2, 1, 3}, slope: 0.8, seNonZero: true},
		{name: "one point", xs: []float64{5}, ys: []float64{1}, slope: 0},
		{name: "one x", xs: []float64{2, 2, 2}, ys: []float64{1, 5, 9}, slope: 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := fitXY(tc.xs, tc.ys)
			if math.Abs(f.slope-tc.slope) > 1e-9 || (f.se > 1e-12) != tc.seNonZero {
				t.Fatalf("fit = %+v, want slope %v (error non-zero: %v)", f, tc.slope, tc.seNonZero)
			}
		})
	}
}

// series makes n samples 10s apart whose metric i follows v(minute).
func series(n int, v func(i int, min float64) float64) []sample {
	out := make([]sample, n)
	for k := range out {
		out[k].at = time.Duration(k) * 10 * time.Second
		for i := range soakMetrics {
			out[k].values[i] = v(i, out[k].at.Minutes())
		}
	}
	return out
}

// steady is a warm, flat processor: RSS 100 MiB, heap 40 MiB, 38
// goroutines, 500 gate members, 1 KiB held, lag 10.
func steady(i int, _ float64) float64 {
	return [...]float64{100 << 20, 40 << 20, 38, 500, 1024, 10}[i]
}

func TestJudgeFlat(t *testing.T) {
	caps := map[int]float64{metricGateMembers: 1000}
	hour := 361 // an hour at one sample every 10s
	for _, tc := range []struct {
		name    string
		samples []sample
		caps    map[int]float64
		widen   float64 // 0: 1
		notFlat string  // the metrics that fail, in order; "" for none
	}{
		{name: "steady", samples: series(hour, steady), caps: caps},
		{name: "warm-up growth in the first half is allowed", caps: caps,
			samples: series(hour, func(i int, min float64) float64 {
				if i == metricRSS && min < 30 {
					return float64(50<<20) + min*float64(2<<20) // 50 → 110 MiB, then flat
				}
				if i == metricRSS {
					return 110 << 20
				}
				return steady(i, min)
			})},
		{name: "a leak of 1 MiB a minute in RSS", caps: caps,
			samples: series(hour, func(i int, min float64) float64 {
				if i == metricRSS {
					return float64(100<<20) + min*float64(1<<20)
				}
				return steady(i, min)
			}), notFlat: "rss_bytes"},
		{name: "goroutines leak one a minute", caps: caps,
			samples: series(hour, func(i int, min float64) float64 {
				if i == metricGoroutines {
					return 38 + min
				}
				return steady(i, min)
			}), notFlat: "goroutines"},
		{name: "lag that grows without bound", caps: caps,
			samples: series(hour, func(i int, min float64) float64 {
				if i == metricLag {
					return 1000 * min
				}
				return steady(i, min)
			}), notFlat: "consumer_lag_records"},
		{name: "a heap sawtooth in a short run is noise", caps: caps,
			samples: series(19, func(i int, min float64) float64 {
				if i == metricHeap {
					return float64([]int{30, 75, 45, 60, 35, 70, 40}[int(min*6)%7] << 20)
				}
				return steady(i, min)
			})},
		{name: "three minutes still warming up (a CI run): RSS and heap step up in the second half", caps: caps,
			samples: ciRun(), notFlat: "rss_bytes, heap_inuse_bytes"},
		{name: "the same three minutes judged with bounds four times as wide", caps: caps, widen: 4,
			samples: ciRun()},
		{name: "gate members grow with the leavers, within the cap", caps: caps,
			samples: series(hour, func(i int, min float64) float64 {
				if i == metricGateMembers {
					return 15 * min // 900 at the end
				}
				return steady(i, min)
			})},
		{name: "gate members beyond the users who may leave", caps: caps,
			samples: series(hour, func(i int, min float64) float64 {
				if i == metricGateMembers {
					return 20 * min // 1200 at the end
				}
				return steady(i, min)
			}), notFlat: "gate_members"},
		{name: "no cap for the gate", samples: series(hour, steady), notFlat: "gate_members"},
		{name: "too few samples", caps: caps, samples: series(3, steady),
			notFlat: "rss_bytes, heap_inuse_bytes, goroutines, held_bytes, consumer_lag_records"},
		{name: "no samples", caps: caps,
			notFlat: "rss_bytes, heap_inuse_bytes, goroutines, gate_members, held_bytes, consumer_lag_records"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := judgeFlat(tc.samples, tc.caps, cmp.Or(tc.widen, 1))
			if got := notFlat(fs); got != tc.notFlat {
				var b strings.Builder
				printFlat(&b, fs)
				t.Fatalf("not flat: %q, want %q\n%s", got, tc.notFlat, b.String())
			}
			if allFlat(fs) != (tc.notFlat == "") {
				t.Fatalf("allFlat = %v with %q not flat", allFlat(fs), tc.notFlat)
			}
		})
	}
}

// ciRun is RSS and heap of a three-minute soak at 3333 signals/s (make
// soak DURATION=3m, as CI runs it): a step at 2m20s, when the processor
// met the hostile mix's megabyte records; the other metrics steady.
func ciRun() []sample {
	rss := []float64{26599424, 45330432, 48345088, 49655808, 50704384, 53194752, 55291904, 56340480, 57913344, 60272640,
		61190144, 61366272, 62251008, 64872448, 89686016, 91521024, 94797824, 96370688, 97456128}
	heap := []float64{3661824, 29556736, 29696000, 23912448, 30638080, 23060480, 29868032, 24395776, 31490048, 24420352,
		23650304, 28966912, 31244288, 26189824, 40058880, 45850624, 44023808, 58138624, 35725312}
	return series(len(rss), func(i int, min float64) float64 {
		k := int(math.Round(min * 6))
		switch i {
		case metricRSS:
			return rss[k]
		case metricHeap:
			return heap[k]
		}
		return steady(i, min)
	})
}

// TestJudgeFlatFigures: the table's figures for a leak, by hand: RSS from
// 100 MiB growing 1 MiB a minute over 60 minutes.
func TestJudgeFlatFigures(t *testing.T) {
	fs := judgeFlat(series(361, func(i int, min float64) float64 {
		if i == metricRSS {
			return float64(100<<20) + min*float64(1<<20)
		}
		return steady(i, min)
	}), map[int]float64{metricGateMembers: 1000}, 1)
	f := fs[metricRSS]
	const mib = 1 << 20
	for _, c := range []struct {
		what      string
		got, want float64
	}{
		{"first", f.first, 100 * mib},
		{"last", f.last, 160 * mib},
		{"max", f.max, 160 * mib},
		{"slope per minute", f.slopePerMin, 1 * mib},
		{"growth over the run", f.growth, 60 * mib},
		{"bound: the floor, 32 MiB, above 20% of the second half's mean of 145 MiB", f.bound, 32 * mib},
	} {
		if math.Abs(c.got-c.want) > 1e-3*mib {
			t.Errorf("%s = %.3f MiB, want %.3f MiB", c.what, c.got/mib, c.want/mib)
		}
	}
	if f.noise > 1e-6 || f.warmSamples != 181 || f.flat {
		t.Errorf("noise %v, %d warm samples, flat %v; want 0, 181, false", f.noise, f.warmSamples, f.flat)
	}
}

// TestSoakVerdict: the soak passes only flat, with its files written, and
// without damage.
func TestSoakVerdict(t *testing.T) {
	sc, ok := findScenario(soakName)
	if !ok {
		t.Fatal("no soak scenario")
	}
	flat := judgeFlat(series(361, steady), map[int]float64{metricGateMembers: 1000}, 1)
	leaky := judgeFlat(series(361, func(i int, min float64) float64 {
		if i == metricHeap {
			return float64(40<<20) + min*float64(2<<20)
		}
		return steady(i, min)
	}), map[int]float64{metricGateMembers: 1000}, 1)
	for _, tc := range []struct {
		name string
		r    result
		pass bool
		word string
	}{
		{"flat", result{sc: sc, soak: &soakResult{flat: flat}}, true, "ok"},
		{"not flat", result{sc: sc, soak: &soakResult{flat: leaky}}, false, "not flat: heap_inuse_bytes"},
		{"flat but leaked", result{sc: sc, soak: &soakResult{flat: flat}, rep: oracle.Report{Leaked: 1}}, false, "1 leaked"},
		{"files not written", result{sc: sc, soak: &soakResult{flat: flat, err: errors.New("disk full")}}, false, "disk full"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pass, why := tc.r.verdict()
			if pass != tc.pass || !strings.Contains(why, tc.word) {
				t.Fatalf("verdict = %v, %q; want %v and %q", pass, why, tc.pass, tc.word)
			}
		})
	}
}

// TestSoakRunsAlone: the soak is not among the default scenarios, runs
// only by itself, and stretches the scenario's bound over its load.
func TestSoakRunsAlone(t *testing.T) {
	for _, name := range defaultScenarios() {
		if name == soakName {
			t.Fatal("the soak is a default scenario")
		}
	}
	bin := t.TempDir() + "/processor"
	if err := os.WriteFile(bin, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	if _, err := parse([]string{"--processor", bin, "--scenarios", "kill,soak"}, &stderr); err == nil || !strings.Contains(err.Error(), "runs alone") {
		t.Errorf("kill,soak: err = %v, want \"runs alone\"", err)
	}
	if _, err := parse([]string{"--processor", bin, "--scenarios", "soak", "--soak-duration", "1m", "--soak-every", "30s"}, &stderr); err == nil {
		t.Error("a soak of two samples was accepted")
	}
	o, err := parse([]string{"--processor", bin, "--scenarios", "soak", "--soak-duration", "1h"}, &stderr)
	if err != nil {
		t.Fatal(err)
	}
	if o.timeout < time.Hour+10*time.Minute {
		t.Errorf("an hour's soak is bounded by %v", o.timeout)
	}
}

// TestDrawSoak: the picture is a PNG, drawn from a run with a failed
// metric and from an empty one.
func TestDrawSoak(t *testing.T) {
	for _, samples := range [][]sample{series(37, steady), nil} {
		var b bytes.Buffer
		if err := drawSoak(&b, "test", samples, judgeFlat(samples, nil, 1)); err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(b.Bytes(), []byte("\x89PNG\r\n\x1a\n")) {
			t.Fatalf("not a PNG: % x", b.Bytes()[:min(8, b.Len())])
		}
	}
}

// TestRedrawSoak: a kept CSV is judged again and drawn beside itself, with
// the gate's cap from the load the flags describe, and no processor.
func TestRedrawSoak(t *testing.T) {
	dir := t.TempDir()
	path := dir + "/soak-x.csv"
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeSamples(f, series(37, steady)); err != nil {
		t.Fatal(err)
	}
	f.Close()
	// 2000 users, 5% leave: 100 leavers, plus the users of the scenes;
	// steady's 500 gate members are too many for them.
	for _, tc := range []struct {
		users string
		err   error
	}{{"20000", nil}, {"2000", errFailed}} {
		var out bytes.Buffer
		err := run(t.Context(), []string{"--soak-redraw", path, "--users", tc.users, "--processor", dir + "/none"}, &out, &out)
		if !errors.Is(err, tc.err) {
			t.Fatalf("users %s: err = %v, want %v\n%s", tc.users, err, tc.err, out.String())
		}
		if !strings.Contains(out.String(), "gate_members") {
			t.Errorf("users %s: no verdict table:\n%s", tc.users, out.String())
		}
	}
	if b, err := os.ReadFile(dir + "/soak-x.png"); err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
		t.Fatalf("no PNG beside the CSV: %v", err)
	}
}

// TestSoakLoad: half the maximum for the run, unless --soak-max-signals
// is set and smaller.
func TestSoakLoad(t *testing.T) {
	for _, tc := range []struct {
		name       string
		rate       float64
		d          time.Duration
		maxSignals int
		wantRate   float64
		want       int
		capped     bool
	}{
		{"within the budget", 1000, 3 * time.Minute, 450_000, 1000, 180_000, false},
		{"an hour at half of 48788/s is capped", 24394, time.Hour, 3_000_000, 3_000_000.0 / 3600, 3_000_000, true},
		{"no cap: an hour at half of 48788/s", 24394, time.Hour, 0, 24394, 24394 * 3600, false},
		{"exactly the budget", 2500, 3 * time.Minute, 450_000, 2500, 450_000, false},
		{"at least one signal", 0.001, time.Minute, 10, 0.001, 1, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rate, n, capped := soakLoad(tc.rate, tc.d, tc.maxSignals)
			if math.Abs(rate-tc.wantRate) > 1e-9 || n != tc.want || capped != tc.capped {
				t.Fatalf("soakLoad = %v, %d, %v; want %v, %d, %v", rate, n, capped, tc.wantRate, tc.want, tc.capped)
			}
		})
	}
}

func TestLeadWith(t *testing.T) {
	kinds := func(ss []workload.Scene) (out []string) {
		for _, s := range ss {
			out = append(out, fmt.Sprintf("%s#%d@%.2f", s.Kind, s.Index, s.At))
		}
		return out
	}
	mk := func(ks ...workload.Kind) []workload.Scene {
		out := make([]workload.Scene, len(ks))
		for i, k := range ks {
			out[i] = workload.Scene{Index: i, Kind: k, At: float64(i) / float64(len(ks))}
		}
		return out
	}
	const p, m, f = workload.KindPoison, workload.KindMisroute, workload.KindFuture
	for _, tc := range []struct {
		name string
		in   []workload.Scene
		want []string
	}{
		{"none", nil, nil},
		{"absent", mk(m, f), []string{"misroute#0@0.00", "future#1@0.50"}},
		{"first already", mk(p, m), []string{"poison#0@0.00", "misroute#1@0.50"}},
		{"late", mk(m, f, p, m), []string{"poison#2@0.00", "misroute#0@0.25", "future#1@0.50", "misroute#3@0.75"}},
		{"two: the first moves", mk(m, p, p), []string{"poison#1@0.00", "misroute#0@0.33", "poison#2@0.67"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leadWith(tc.in, p)
			if got := kinds(tc.in); !slices.Equal(got, tc.want) {
				t.Fatalf("got %v, want %v", got, tc.want)
			}
		})
	}
}

// writeSamples writes samples through the soak's own writer.
func writeSamples(w io.Writer, samples []sample) error {
	sw, err := newSampleWriter(w)
	if err != nil {
		return err
	}
	for _, s := range samples {
		if err := sw.write(s); err != nil {
			return err
		}
	}
	return nil
}
