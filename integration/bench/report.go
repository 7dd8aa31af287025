package main

import (
	"bufio"
	"bytes"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/cohortgate/cohortgate/integration/workload"
)

// results is everything one `bench run` measured.
type results struct {
	Started, Finished time.Time
	Args              []string
	Machine           machine
	Broker            string
	Load              loadResult
	Throughput        []throughputResult
	Profiles          []profileResult
	Latency           *latencyResult
	Restores          []restoreResult
	Rebuild           *rebuildResult
	Gate              *gateResults
	Agreement         *agreeResult
	Errors            []string
}

func (r *results) errorf(format string, args ...any) {
	r.Errors = append(r.Errors, fmt.Sprintf(format, args...))
}

// loadResult is the pre-load.
type loadResult struct {
	Config            workload.Config
	Signals, Commands int64
	Partitions        int
	Took              time.Duration
	Command           string
}

// profileResult is the flat `go tool pprof -top` of one run's CPU profile.
type profileResult struct {
	Run   string
	Round int
	Path  string
	Top   string
}

// machine describes where the run happened.
type machine struct {
	Cores      int
	CPU        string
	MemGiB     float64
	Go         string
	LoadAvg    string // /proc/loadavg at the start
	LoadAvgEnd string
}

func readMachine() machine {
	m := machine{Cores: runtime.NumCPU(), CPU: "unknown", Go: runtime.Version(), LoadAvg: readLoadAvg()}
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		sc := bufio.NewScanner(bytes.NewReader(b))
		for sc.Scan() {
			if k, v, ok := strings.Cut(sc.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
				m.CPU = strings.TrimSpace(v)
				break
			}
		}
	}
	if b, err := os.ReadFile("/proc/meminfo"); err == nil {
		if kb, err := parseStatusKB(b, "MemTotal"); err == nil {
			m.MemGiB = float64(kb) / (1 << 30)
		}
	}
	return m
}

func readLoadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return "load average " + strings.Join(f[:3], " ")
}

// appendReport appends report to the file at path, creating it with a
// preamble if it does not exist, and adds row to its trend table (above
// trendMarker) when it has one. Earlier results are never rewritten.
func appendReport(path, report, row string) error {
	if b, err := os.ReadFile(path); err == nil && row != "" {
		if i := bytes.Index(b, []byte(trendMarker)); i >= 0 {
			withRow := append(append(append([]byte(nil), b[:i]...), row+"\n"...), b[i:]...)
			if err := os.WriteFile(path, withRow, 0o644); err != nil {
				return err
			}
		}
	}
	_, err := os.Stat(path)
	fresh := os.IsNotExist(err)
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	if fresh {
		if _, err := f.WriteString(preamble); err != nil {
			f.Close()
			return err
		}
	}
	if _, err := f.WriteString("\n" + report); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

const preamble = `# Benchmarks

Results of ` + "`make bench`" + ` (integration/bench), appended one section per run; old
sections stay. How each figure is measured is in integration/bench/main.go and below
each table; aims are measured here, never asserted.
`

// markdown renders the results as one section of BENCHMARKS.md: at most
// about 80 lines (the summary over the rounds, the aims, the agreement
// check, one line per other phase, the top frames of one profile). The
// full figures are in details, written to the work folder; detailsPath
// names that file in the section.
func (r *results) markdown(o *runOptions, detailsPath string) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("## %s\n\n", r.Started.UTC().Format("2006-01-02 15:04 MST"))
	r.header(w, o)
	if detailsPath != "" {
		w("- every repetition, the commands and the profiles' tops (and the gate benchmarks when they ran): `%s`; profiles beside it (`*.pprof`, `*.top.txt`)\n", detailsPath)
	}
	r.summarySection(w, o)
	r.agreementSection(w)
	r.otherPhasesSection(w)
	r.topFramesSection(w)
	return b.String()
}

// details renders everything the run measured, for the work folder.
func (r *results) details(o *runOptions) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("# bench run of %s, in full\n\n", r.Started.UTC().Format("2006-01-02 15:04 MST"))
	r.header(w, o)
	r.summarySection(w, o)
	r.agreementSection(w)
	r.targetsSection(w)
	r.loadSection(w)
	r.throughputSection(w)
	r.latencySection(w)
	r.gateSection(w)
	r.restoreSection(w)
	r.profileSection(w)
	return b.String()
}

func (r *results) header(w writef, o *runOptions) {
	w("- machine: %d cores, %s, %.0f GiB RAM, %s; %s at the start, %s at the end (shared with other work)\n",
		r.Machine.Cores, r.Machine.CPU, r.Machine.MemGiB, r.Machine.Go, r.Machine.LoadAvg, r.Machine.LoadAvgEnd)
	w("- broker: %s (one KRaft node, on the same machine)\n", r.Broker)
	invoked := o.invokedAs
	if invoked == "" {
		invoked = "bench run " + joinArgs(r.Args)
	}
	w("- command: `%s`, which ran `bench run %s`\n", invoked, joinArgs(r.Args))
	took := r.Finished.Sub(r.Started).Round(time.Second).String() + " (bench run)"
	if r.Gate != nil && r.Gate.Took > 0 {
		took += fmt.Sprintf(", after %s of pkg/gate benchmarks", r.Gate.Took.Round(time.Second))
	}
	w("- took %s\n", took)
	if r.Load.Signals > 0 {
		c := r.Load.Config
		w("- load: %d signals of %d bytes over %d users, %.3g%% leaving, %.3g%% rejoining (seed %d), %d commands, %d partitions; every run reads it all, %d rounds\n",
			r.Load.Signals, c.ValueSize, c.Users, c.LeavePct, c.RejoinPct, c.Seed, r.Load.Commands, r.Load.Partitions, o.rounds)
	}
	if len(r.Errors) > 0 {
		w("- **failed**: %s\n", oneLine(strings.Join(r.Errors, "; ")))
	}
}

// summarySection is the throughput over the rounds and the ratios.
func (r *results) summarySection(w writef, o *runOptions) {
	sums := r.summaries()
	if len(sums) == 0 {
		return
	}
	w("\n### Throughput: median [min – max] over the rounds\n\n")
	w("| run | CPU-s per M signals | signals/s | signals per CPU-s | forwarded | peak RSS |\n|---|---|---|---:|---:|---:|\n")
	for _, s := range sums {
		failed := ""
		if s.Failed > 0 {
			failed = fmt.Sprintf(" (%d round(s) failed)", s.Failed)
		}
		if s.CPU.N == 0 {
			w("| %s | failed |||||\n", s.Name)
			continue
		}
		w("| %s%s | %s | %s | %s | %s | %s |\n", s.Name, failed,
			spreadText(s.CPU, fixed(2)), spreadText(s.Rate, thousands), thousands(s.PerCPU.Median),
			thousands(s.Forwarded.Median), mib(int64(s.RSS.Median)))
	}
	w("\nCPU: the child's utime+stime (/proc/<pid>/stat) from its first commit (t0) to the commit of the last signal (t1); signals/s over the same window. Runs interleaved: each round does every run once. Processor runs use `--grace 0`; Kafka Streams: one stream thread, exactly_once_v2, commit interval 100 ms as everywhere; streams-grace: versioned KTable stamped with at_ns, `Joined.withGracePeriod(%v)`.\n", o.streamsGrace)
	rs := r.ratios()
	if len(rs) == 0 {
		return
	}
	w("\n| X / Y | CPU-s per M, X over Y | signals/s, Y over X | aim | worst round | met |\n|---|---|---|---|---:|---|\n")
	for _, x := range rs {
		aim, worst := "", "–"
		if x.On != "" {
			op := "≥"
			if x.AtMost {
				op = "≤"
			}
			figure := "CPU"
			if x.On == "rate" {
				figure = "signals/s"
			}
			aim = fmt.Sprintf("%s %s %.2f (%s)", figure, op, x.Limit, x.Why)
			worst = fixed(2)(x.Worst)
		}
		w("| %s | %s | %s | %s | %s | %s |\n", x.Label, spreadText(x.CPU, fixed(2)), spreadText(x.Rate, fixed(2)), aim, worst, x.Met)
	}
	w("\nEach ratio is taken within a round (X and Y of the same round) and given as median [min – max]; an aim is met only when its worst round meets it.\n")
}

// spreadText formats a spread as "median [min – max]".
func spreadText(s spread, show func(float64) string) string {
	if s.N == 0 {
		return "–"
	}
	if s.N == 1 {
		return show(s.Median)
	}
	return fmt.Sprintf("%s [%s – %s]", show(s.Median), show(s.Min), show(s.Max))
}

func (r *results) agreementSection(w writef) {
	a := r.Agreement
	if a == nil {
		return
	}
	w("\n### Drop agreement on a small seeded load\n\n")
	if a.Load.Signals > 0 {
		c := a.Load.Config
		w("%d signals over %d users, %.3g%% leaving, %.3g%% rejoining (seed %d), %d commands; %d signals marked gated by the load (produced after the leave's acknowledgement, stamped at or after its boundary).\n\n",
			a.Load.Signals, c.Users, c.LeavePct, c.RejoinPct, c.Seed, a.Load.Commands, a.Gated)
	}
	if a.Err != "" {
		w("failed: %s\n\n", oneLine(a.Err))
	}
	w("| run | forwarded | dropped | gated forwarded | ungated dropped | only here / only in processor-eos | of which in a command's ms | users whose count differs |\n|---|---:|---:|---:|---:|---|---:|---:|\n")
	for _, x := range a.Runs {
		if x.Err != "" {
			w("| %s | failed: %s |||||||\n", x.Name, oneLine(x.Err))
			continue
		}
		w("| %s | %d | %d | %d | %d | %d / %d | %d | %d |\n", x.Name, x.Forwarded, x.Dropped, x.Leaked, x.Lost, x.Extra, x.Missing, x.SameMs, x.UsersDiffer)
	}
}

// otherPhasesSection gives one line per phase besides the throughput.
func (r *results) otherPhasesSection(w writef) {
	var lines []string
	if l := r.Latency; l != nil && l.Found > 0 {
		p99 := l.p99Spread()
		lines = append(lines, fmt.Sprintf("- leave → gate closed, from acknowledgement (%d leaves in %d rounds at %s signals/s): p99 %s [%s – %s] over the rounds (all leaves: p50 %s, p99 %s, max %s); aim p99 ≤ 10 ms in the worst round: %s",
			l.Found, len(l.Rounds), thousands(l.Rate), msf(p99.Median), msf(p99.Min), msf(p99.Max),
			ms(l.Latency.P50), ms(l.Latency.P99), ms(l.Latency.Max), metNo(p99.N > 0 && p99.Max <= 0.010)))
		if over, met, ok := l.floorAim(); ok {
			fl := l.floorP99Spread()
			lines = append(lines, fmt.Sprintf("- its floor, a plain franz-go consumer's acknowledgement → poll of the same leaves in the same run: p99 %s [%s – %s]; aim p99 ≤ floor p99 + 2 ms in every round (worst round %s above its floor): %s",
				msf(fl.Median), msf(fl.Min), msf(fl.Max), ms(over), metNo(met)))
		}
	} else if l != nil {
		lines = append(lines, "- leave latency: failed: "+oneLine(l.Err))
	}
	for _, x := range r.Restores {
		if x.Err != "" {
			lines = append(lines, fmt.Sprintf("- restore of %d members: failed: %s", x.Members, oneLine(x.Err)))
			continue
		}
		lines = append(lines, fmt.Sprintf("- restore of %s members: %s (%s members/s), peak RSS %s, store %s",
			thousands(float64(x.Restored)), x.Took.Round(time.Millisecond), thousands(x.Rate()), mib(x.PeakRSS), mib(x.StoreBytes)))
	}
	if x := r.Rebuild; x != nil && x.Err == "" {
		lines = append(lines, fmt.Sprintf("- one partition rebuilt from %d commands on an empty data dir: %s (%s commands/s)",
			x.Commands, x.Took.Round(time.Millisecond), thousands(x.Rate())))
	}
	for _, t := range r.targets() {
		if t.Met != "–" {
			lines = append(lines, fmt.Sprintf("- %s: %s (target %s; met: %s)", t.Figure, t.Got, t.Want, t.Met))
		}
	}
	if len(lines) == 0 {
		return
	}
	w("\n### Other phases\n\n%s\n", strings.Join(lines, "\n"))
}

// topFramesSection gives the first frames of the processor-eos and
// passthrough-eos CPU profiles of the first round.
func (r *results) topFramesSection(w writef) {
	const frames = 5
	var blocks []string
	for _, run := range []string{runProcessorEOS, runPassthroughEOS} {
		for _, p := range r.Profiles {
			if p.Run != run || p.Round != 1 {
				continue
			}
			var rows []string
			past := false
			for _, line := range strings.Split(p.Top, "\n") {
				if strings.Contains(line, "flat%") {
					past = true
					continue
				}
				if past && len(rows) < frames {
					rows = append(rows, line)
				}
			}
			blocks = append(blocks, fmt.Sprintf("%s, round 1, flat (`%s`):\n\n```\n%s\n```\n", run, filepath.Base(p.Path), strings.Join(rows, "\n")))
			break
		}
	}
	if len(blocks) == 0 {
		return
	}
	w("\n### Top CPU frames\n\n%s", strings.Join(blocks, "\n"))
}

type writef func(format string, args ...any)

// target is one of the throughput targets next to what this run measured.
type target struct {
	Figure, Want, Got string
	Met               string // "yes", "no", or "–" when not measured
}

// Names of the pkg/gate benchmarks the targets read.
const (
	gateAbsent10M  = "Allows/members=10M/keys=absent/impl=gate/serial"
	gatePresent10M = "Allows/members=10M/keys=present/impl=gate/serial"
	gateBuild10M   = "Build/impl=gate/capacity/members=10M"
)

// targets compares the run with the throughput targets besides the throughput
// ratios (those are in costRatios, over the rounds): lookups are serial,
// one goroutine, as a partition's worker does them; restore is the
// largest store restored.
func (r *results) targets() []target {
	atLeast := func(figure, want string, got, limit float64, show func(float64) string) target {
		t := target{Figure: figure, Want: want, Got: "–", Met: "–"}
		if !math.IsNaN(got) {
			t.Got, t.Met = show(got), yesNo(got >= limit)
		}
		return t
	}
	atMost := func(figure, want string, got, limit float64, show func(float64) string) target {
		t := target{Figure: figure, Want: want, Got: "–", Met: "–"}
		if !math.IsNaN(got) {
			t.Got, t.Met = show(got), yesNo(got <= limit)
		}
		return t
	}
	gate := func(name, unit string) float64 {
		if r.Gate == nil {
			return math.NaN()
		}
		for _, b := range r.Gate.Benches {
			if b.Name == name {
				if v, ok := b.metric(unit); ok {
					return v
				}
			}
		}
		return math.NaN()
	}
	restore := math.NaN()
	largest := 0
	for _, x := range r.Restores {
		if x.Err == "" && x.Members > largest {
			largest, restore = x.Members, x.Rate()
		}
	}
	p99 := math.NaN()
	if l := r.Latency; l != nil && l.Found > 0 {
		p99 = float64(l.Latency.P99) / 1e6
	}
	restoreFigure := "restore, members/s"
	if largest > 0 {
		restoreFigure = fmt.Sprintf("restore of %s members, members/s", thousands(float64(largest)))
	}
	return []target{
		atMost("lookup of an absent user at 10M members, ns", "≤ 15", gate(gateAbsent10M, "ns/op"), 15, fixed(1)),
		atMost("lookup of a member at 10M members, ns", "≤ 80", gate(gatePresent10M, "ns/op"), 80, fixed(1)),
		atMost("bytes per member at 10M", "≤ 40", gate(gateBuild10M, "B/member"), 40, fixed(1)),
		atLeast(restoreFigure, "≥ 5,000,000", restore, 5e6, thousands),
		atMost("leave latency p99, ms", "≤ 20", p99, 20, fixed(2)),
	}
}

// fixed formats with n decimals.
func fixed(n int) func(float64) string {
	return func(f float64) string { return strconv.FormatFloat(f, 'f', n, 64) }
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func (r *results) targetsSection(w writef) {
	w("\n### Targets: gate lookups, bytes per member, restore, leave latency\n\n")
	w("| figure | target | measured | met |\n|---|---:|---:|---|\n")
	for _, t := range r.targets() {
		w("| %s | %s | %s | %s |\n", t.Figure, t.Want, t.Got, t.Met)
	}
	w("\nMeasured, never asserted; every figure is detailed below. Lookups: the serial pkg/gate benchmarks (`%s`, `%s`); bytes per member: `%s`.\n",
		gateAbsent10M, gatePresent10M, gateBuild10M)
}

func (r *results) loadSection(w writef) {
	if r.Load.Signals == 0 {
		return
	}
	c := r.Load.Config
	w("\n### Load\n\n")
	w("%d signals of %d bytes over %d users, %.3g%% leaving, %.3g%% rejoining (seed %d): %d commands; %d partitions; written in %.1fs by `%s`.\n",
		r.Load.Signals, c.ValueSize, c.Users, c.LeavePct, c.RejoinPct, c.Seed, r.Load.Commands,
		r.Load.Partitions, r.Load.Took.Seconds(), r.Load.Command)
}

func (r *results) throughputSection(w writef) {
	if len(r.Throughput) == 0 {
		return
	}
	w("\n### Throughput\n\n")
	w("| run | round | signals/s | CPU-s per M signals | signals per CPU-s | peak RSS | start-up | window | forwarded | duplicates | forwarded/s incl. start-up | CPU-s total | child cores | machine busy (cores) | cycle (end) ms |\n")
	w("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, t := range r.Throughput {
		if t.Err != "" {
			w("| %s | %d | failed: %s |||||||||||||\n", t.Name, t.Round, oneLine(t.Err))
			continue
		}
		cycle := "–"
		if t.Cycles > 0 {
			cycle = fmt.Sprintf("%.0f", t.CycleMs())
			if t.EndSeconds > 0 {
				cycle += fmt.Sprintf(" (%.0f)", t.EndMs())
			}
		}
		w("| %s | %d | %s | %.2f | %s | %s | %.1fs | %.1fs | %d | %d | %s | %.1f | %.2f | %.2f | %s |\n",
			t.Name, t.Round, thousands(t.Rate), t.CPUPerMillion(), thousands(t.PerCPUSecond()), mib(t.PeakRSS),
			t.Startup.Seconds(), t.Window.Seconds(), t.Out.Distinct, t.Out.Duplicates,
			thousands(t.OutRate), t.CPUTotal, ratio(t.CPUWindow, t.Window.Seconds()), t.MachineBusy, cycle)
	}
	w("\nsignals/s: signals committed by the run's group between t0 (first commit seen) and t1 (every partition committed to its end), over t1−t0, polled every 100 ms. CPU: the child process's utime+stime (/proc/<pid>/stat) over the same window. Peak RSS: VmHWM. child cores: its CPU-s per second of the window; machine busy: every core's busy time over the window (/proc/stat): the child, the broker, the harness and other work. cycle: mean length of a processing cycle (poll until the 100 ms deadline, then end it: flush and commit, or a transaction), from the child's cycle counters; in parentheses the mean time spent ending one (passthrough only). forwarded: distinct signals in the output, read read_committed after the run. Processor runs use `--grace 0` (the signals are in the past, so alignment waits for one commands end-offset observation); commit interval 100 ms everywhere.\n\n")
	for _, t := range r.Throughput {
		if t.Command != "" {
			w("- %s round %d: `%s`\n", t.Name, t.Round, t.Command)
		}
	}
}

func (r *results) latencySection(w writef) {
	l := r.Latency
	if l == nil {
		return
	}
	w("\n### Leave latency under load\n\n")
	if l.Err != "" {
		w("failed: %s\n", oneLine(l.Err))
		if l.Found == 0 {
			return
		}
	}
	if len(l.Rounds) > 0 {
		w("| round | leaves | p50 | p99 | max | floor p50 | floor p99 | p99 above the floor's | signals/s meanwhile | processor cores | run-queue wait, ms/s: processor / load generator / harness |\n|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for i, x := range l.Rounds {
			wait := ""
			if rw := x.RunWait; rw != nil {
				wait = fmt.Sprintf("%.0f / %.0f / %.0f", rw.Processor, rw.Loadgen, rw.Harness)
			}
			w("| %d | %d | %s | %s | %s | %s | %s | %s | %s | %.2f | %s |\n", i+1, x.Found, ms(x.Latency.P50), ms(x.Latency.P99), ms(x.Latency.Max),
				ms(x.Floor.P50), ms(x.Floor.P99), ms(x.Latency.P99-x.Floor.P99), thousands(x.Rate), x.CPU, wait)
		}
		w("\nRun-queue wait: the time the process's threads were runnable but waited for a core while the round's leaves went out, summed over its threads (`/proc/<pid>/task/*/schedstat`), per second; the harness runs the floor's consumer.\n")
		w("\nAll rounds' leaves together:\n\n")
	}
	w("| from | leaves | p50 | p99 | p99.9 | max | min | signals/s meanwhile (target) | processor cores |\n")
	w("|---|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	w("| acknowledgement | %d of %d | %s | %s | %s | %s | %s | %s (%s) | %.2f |\n", l.Found, l.Sent,
		ms(l.Latency.P50), ms(l.Latency.P99), ms(l.Latency.P999), ms(l.Latency.Max), ms(l.Latency.Min),
		thousands(l.Rate), thousands(l.TargetRate), l.CPU)
	w("| send | %d of %d | %s | %s | %s | %s | %s | | |\n", l.Found, l.Sent,
		ms(l.FromSend.P50), ms(l.FromSend.P99), ms(l.FromSend.P999), ms(l.FromSend.Max), ms(l.FromSend.Min))
	w("| floor: acknowledgement → a plain consumer's poll | %d | %s | %s | %s | %s | %s | | |\n", l.Floor.N,
		ms(l.Floor.P50), ms(l.Floor.P99), ms(l.Floor.P999), ms(l.Floor.Max), ms(l.Floor.Min))
	w("\nTo `receipt.applied_at_ns` of the leave's changelog record (the processor's clock when the leave was in force in its gate), matched by request_id, from the return of the leave's ProduceSync (acknowledged by Kafka; %d of the leaves were applied before the producer saw its acknowledgement: negative values), or from just before it was produced (its at_ns). One leave in flight at a time, distinct users, while the load generator wrote signals at half the exactly-once rate. Processor: exactly once, `--grace %v`: `%s`.\n", l.Negative, l.Grace, l.Command)
	if len(l.Steps) > 0 {
		w("\nWhere the time goes, from the processor's own histograms over the leaves' span (every commands batch then held leaves only): the fetch delay per command, then each step of a batch; a leave is in force once `gate` ends; `sync` (the write-ahead log's, after which the batch's records are queued and its offsets release held signals) runs beside the next batch. Quantiles are interpolated within buckets a factor √2 wide.\n\n")
		w("| step | observed | mean | p50 | p99 |\n|---|---:|---:|---:|---:|\n")
		for _, s := range l.Steps {
			name := "fetch delay (record timestamp to poll)"
			if _, step, ok := strings.Cut(s.Name, "{"); ok {
				name = "batch: " + strings.TrimSuffix(step, "}")
			}
			if s.Name == goSchedLatencies {
				name = "Go scheduler: a goroutine runnable to running (any goroutine; buckets a factor 11 wide)"
			}
			w("| %s | %s | %s | %s | %s |\n", name, thousands(s.Count), msf(s.Mean), msf(s.P50), msf(s.P99))
		}
	}
}

func (r *results) gateSection(w writef) {
	if r.Gate == nil || len(r.Gate.Benches) == 0 {
		return
	}
	w("\n### Gate (go test -bench ./pkg/gate)\n\n")
	if r.Gate.CPU != "" {
		w("cpu: %s\n\n", r.Gate.CPU)
	}
	w("| benchmark | ns/op | other |\n|---|---:|---|\n")
	for _, g := range r.Gate.Benches {
		ns, _ := g.metric("ns/op")
		var other []string
		for _, m := range g.Metrics {
			if m.Unit != "ns/op" {
				other = append(other, fmt.Sprintf("%s %s", trimFloat(m.Value), m.Unit))
			}
		}
		w("| %s | %s | %s |\n", g.Name, trimFloat(ns), strings.Join(other, ", "))
	}
}

func (r *results) restoreSection(w writef) {
	if len(r.Restores) == 0 && r.Rebuild == nil {
		return
	}
	w("\n### Restore\n\n")
	if len(r.Restores) > 0 {
		w("| members | took | members/s | peak RSS | store on disk |\n|---:|---:|---:|---:|---:|\n")
		for _, x := range r.Restores {
			if x.Err != "" {
				w("| %d | failed: %s ||||\n", x.Members, oneLine(x.Err))
				continue
			}
			w("| %d | %s | %s | %s | %s |\n", x.Restored, x.Took.Round(time.Millisecond), thousands(x.Rate()), mib(x.PeakRSS), mib(x.StoreBytes))
		}
		w("\nThe processor's own figure (log line `restored membership state ... took=`): Pebble scan, decoding and gate inserts at start-up, page cache warm. Each member: one open leave and a note like the processor's; written with membership batches of 100 000.\n")
	}
	if x := r.Rebuild; x != nil {
		w("\n| one partition from the commands topic alone | commands | took | commands/s | from process start | peak RSS |\n|---|---:|---:|---:|---:|---:|\n")
		if x.Err != "" {
			w("| rebuild | failed: %s |||||\n", oneLine(x.Err))
		} else {
			w("| empty data dir | %d | %s | %s | %s | %s |\n", x.Commands, x.Took.Round(time.Millisecond), thousands(x.Rate()),
				x.Wall.Round(time.Millisecond), mib(x.PeakRSS))
		}
		w("\nA leave then a rejoin of each of %d users in one partition; took: the processor's log line `partition caught up with its commands` (from assignment until the commands are applied through an end offset observed after it).\n", x.Commands/2)
	}
}

func (r *results) profileSection(w writef) {
	if len(r.Profiles) == 0 {
		return
	}
	w("\n### CPU profiles (flat; both orders, and the allocation profiles, in the *.top.txt files)\n\n")
	for _, p := range r.Profiles {
		w("%s round %d (`%s`):\n\n```\n%s\n```\n\n", p.Run, p.Round, p.Path, p.Top)
	}
}

// trendMarker ends the trend table of BENCHMARKS.md: appendReport adds
// the run's row just above it.
const trendMarker = "<!-- trend: bench run adds its row above this line -->"

// trendRow is the run's row of the trend table: medians of CPU-s per
// million signals of each run, processor-eos's signals/s, the leave p99
// and the largest restore.
func (r *results) trendRow(o *runOptions) string {
	cpu := make(map[string]string)
	rate := "–"
	for _, s := range r.summaries() {
		if s.CPU.N > 0 {
			cpu[s.Name] = fixed(2)(s.CPU.Median)
			if s.Name == runProcessorEOS {
				rate = thousands(s.Rate.Median)
			}
		}
	}
	get := func(name string) string {
		if v, ok := cpu[name]; ok {
			return v
		}
		return "–"
	}
	p99 := "–"
	if l := r.Latency; l != nil && l.Found > 0 {
		p99 = fixed(1)(l.p99Spread().Median * 1e3)
	}
	restore := "–"
	for _, x := range r.Restores {
		if x.Err == "" {
			restore = fmt.Sprintf("%s at %s", thousands(x.Rate()), thousands(float64(x.Restored)))
		}
	}
	return fmt.Sprintf("| %s | %s | %d | %s | %s | %s | %s | %s | %s | %s | %s | %s |",
		r.Started.UTC().Format("2006-01-02 15:04"), thousands(float64(r.Load.Signals)), o.rounds,
		get(runPassthrough), get(runPassthroughEOS), get(runProcessorALO), get(runProcessorEOS), get(runStreams), get(runStreamsGrace),
		rate, p99, restore)
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/1e6) }

// floorAim reports how far the worst round's p99 lies above its floor's
// p99, and whether every round is within 2 ms of its floor; ok is false
// when no round measured a floor.
func (l *latencyResult) floorAim() (worst time.Duration, met, ok bool) {
	met = true
	for _, x := range l.Rounds {
		if x.Floor.N == 0 {
			continue
		}
		over := x.Latency.P99 - x.Floor.P99
		if !ok || over > worst {
			worst = over
		}
		ok = true
		met = met && over <= 2*time.Millisecond
	}
	return worst, met && ok, ok
}

// floorP99Spread is the rounds' floor p99 in seconds, median [min – max].
func (l *latencyResult) floorP99Spread() spread {
	var xs []float64
	for _, x := range l.Rounds {
		if x.Floor.N > 0 {
			xs = append(xs, x.Floor.P99.Seconds())
		}
	}
	return spreadOf(xs)
}

// p99Spread is the rounds' p99 in seconds, median [min – max].
func (l *latencyResult) p99Spread() spread {
	var xs []float64
	for _, x := range l.Rounds {
		xs = append(xs, x.Latency.P99.Seconds())
	}
	return spreadOf(xs)
}

func metNo(b bool) string {
	if b {
		return "met"
	}
	return "not met"
}

// msf formats seconds as milliseconds; NaN as a dash.
func msf(s float64) string {
	if math.IsNaN(s) {
		return "–"
	}
	return fmt.Sprintf("%.2f ms", s*1e3)
}

// trimFloat formats f with 4 significant digits, and from 10,000 up as a
// whole number with separators.
func trimFloat(f float64) string {
	switch {
	case math.IsNaN(f):
		return "–"
	case math.Abs(f) >= 1e4:
		return thousands(f)
	}
	return strconv.FormatFloat(f, 'g', 4, 64)
}

func oneLine(s string) string { return strings.ReplaceAll(strings.ReplaceAll(s, "\n", " "), "|", "/") }
