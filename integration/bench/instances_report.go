package main

import (
	"fmt"
	"strings"
	"time"
)

// instancesStep is one step of a round of bench instances: the n-th
// instance joined a group of n-1, then the group of n worked through a
// batch. See instancesOptions for how each figure is taken.
type instancesStep struct {
	Round, N int

	// ForwardAgain is the last "partitions assigned" line of the step to
	// the moment every partition had forwarded a probe written after it.
	ForwardAgain time.Duration
	// FromRelease is from the first "partitions released" line of the
	// step (a running instance giving partitions up: the rebalance's
	// start) to the same moment; 0 when no partition was taken away.
	FromRelease time.Duration
	// WorstWait is the longest a probe of the step waited from its write
	// to its read from the output: what a signal waited at worst.
	WorstWait time.Duration
	// Settle is the newcomer's start to the step being settled.
	Settle time.Duration
	// SettleCPU is the CPU-seconds of every instance of the group over
	// Settle.
	SettleCPU float64
	// Restored and Replayed are the partitions the step's new owners took
	// over by restoring their users from the changelog and by replaying
	// their commands from offset 0 (their log lines).
	Restored, Replayed int

	// The batch: Signals committed by the group between t0 and t1
	// (Window), CPU the instances' CPU-seconds over it, and PeakRSS the
	// largest VmHWM among the instances, in bytes.
	Signals int64
	Window  time.Duration
	CPU     float64
	PeakRSS int64

	Err string
}

// CPUPerMillion is the group's CPU-seconds per million signals of the
// batch.
func (s instancesStep) CPUPerMillion() float64 { return ratio(s.CPU, float64(s.Signals)/1e6) }

// Rate is the group's signals per second over the batch.
func (s instancesStep) Rate() float64 { return ratio(float64(s.Signals), s.Window.Seconds()) }

// instancesReport is a whole bench instances run.
type instancesReport struct {
	Options    *instancesOptions
	Started    time.Time
	Took       time.Duration
	Machine    machine
	LoadAvgEnd string
	Broker     string
	Command    string // an instance's command line

	HistoryWrite time.Duration // writing the history's commands
	SeedTook     time.Duration // the seed's start to every command judged
	SeedCPU      float64       // its CPU-seconds then
	Changelog    int64         // changelog records after the seed

	Steps []instancesStep
}

func (r *instancesReport) failures() int {
	n := 0
	for _, s := range r.Steps {
		if s.Err != "" {
			n++
		}
	}
	return n
}

// instancesRow is the figures of one group size over the rounds.
type instancesRow struct {
	N, Done, Failed                      int
	ForwardAgain, FromRelease, WorstWait spread // seconds
	SettleCPU, Settle                    spread // CPU-seconds, seconds
	CPU, Rate, RSS                       spread
	CPUvsOne                             spread // per round: CPU per million at N over that at 1
	Restored, Replayed                   int    // partitions, over the rounds
}

// rows summarizes the steps by group size.
func (r *instancesReport) rows() []instancesRow {
	one := make(map[int]float64) // round → CPU per million of 1 instance
	maxN := 0
	for _, s := range r.Steps {
		maxN = max(maxN, s.N)
		if s.Err == "" && s.N == 1 {
			one[s.Round] = s.CPUPerMillion()
		}
	}
	var rows []instancesRow
	for n := 1; n <= maxN; n++ {
		row := instancesRow{N: n}
		var fwd, rel, wait, scpu, settle, cpu, rate, rss, vs []float64
		for _, s := range r.Steps {
			if s.N != n {
				continue
			}
			if s.Err != "" {
				row.Failed++
				continue
			}
			row.Done++
			fwd = append(fwd, s.ForwardAgain.Seconds())
			if s.FromRelease > 0 {
				rel = append(rel, s.FromRelease.Seconds())
			}
			wait = append(wait, s.WorstWait.Seconds())
			scpu = append(scpu, s.SettleCPU)
			settle = append(settle, s.Settle.Seconds())
			cpu = append(cpu, s.CPUPerMillion())
			rate = append(rate, s.Rate())
			rss = append(rss, float64(s.PeakRSS))
			if base, ok := one[s.Round]; ok {
				vs = append(vs, ratio(s.CPUPerMillion(), base))
			}
			row.Restored += s.Restored
			row.Replayed += s.Replayed
		}
		row.ForwardAgain, row.FromRelease, row.WorstWait, row.SettleCPU, row.Settle = spreadOf(fwd), spreadOf(rel), spreadOf(wait), spreadOf(scpu), spreadOf(settle)
		row.CPU, row.Rate, row.RSS, row.CPUvsOne = spreadOf(cpu), spreadOf(rate), spreadOf(rss), spreadOf(vs)
		rows = append(rows, row)
	}
	return rows
}

// markdown is the section appended to BENCHMARKS.md.
func (r *instancesReport) markdown() string {
	o := r.Options
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	invoked := o.invokedAs
	if invoked == "" {
		invoked = fmt.Sprintf("bench instances --members %d --signals %d --runs %d", o.members, o.signals, o.runs)
	}
	m := r.Machine
	how := "in one group"
	if o.cold {
		how = "started at once into an empty group"
	}
	w("## %s UTC: 1 to %d instances %s, %s members\n\n", r.Started.UTC().Format("2006-01-02 15:04"), o.max, how, thousands(float64(o.members)))
	w("- machine: %d cores, %s, %.0f GiB RAM, %s; %s at the start, %s at the end (shared with other work)\n",
		m.Cores, m.CPU, m.MemGiB, m.Go, m.LoadAvg, r.LoadAvgEnd)
	w("- broker: %s (one KRaft node, on the same machine)\n", r.Broker)
	w("- command: `%s`; took %v\n", invoked, r.Took.Round(time.Second))
	w("- history: %s users over %d partitions, each left and rejoined (%s commands, written in %.0f s); a seed processor replayed them (`--handover-replay`) in %.0f s (%.0f CPU-s), leaving %s changelog records\n",
		thousands(float64(o.members)), o.partitions, thousands(float64(2*o.members)), r.HistoryWrite.Seconds(), r.SeedTook.Seconds(), r.SeedCPU, thousands(float64(r.Changelog)))
	w("- each step: %s signals of %d bytes over the members, written in one transaction; %d round(s) of 1 → %d instances; probes every %v\n",
		thousands(float64(o.signals)), o.valueSize, o.runs, o.max, o.probeEvery)
	w("- instances: `%s` (the data dir and transactional id differ); logs under the work dir\n\n", r.Command)

	secs := func(s spread) string { return spreadText(s, func(x float64) string { return fmt.Sprintf("%.2f", x) }) }
	w("| instances | last assignment → every partition forwarding, s | first release → every partition forwarding, s | worst probe wait, s | newcomer start → settled, s | CPU-s of the group to settle | partitions restored / replayed | CPU-s per M signals, group | vs 1 instance | signals/s | peak RSS, largest instance |\n")
	w("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, row := range r.rows() {
		failed := ""
		if row.Failed > 0 {
			failed = fmt.Sprintf(" (%d failed)", row.Failed)
		}
		rss := "–"
		if row.RSS.N > 0 {
			rss = mib(int64(row.RSS.Max))
		}
		w("| %d%s | %s | %s | %s | %s | %s | %d / %d | %s | %s | %s | %s |\n", row.N, failed,
			secs(row.ForwardAgain), secs(row.FromRelease), secs(row.WorstWait), secs(row.Settle),
			spreadText(row.SettleCPU, func(x float64) string { return fmt.Sprintf("%.1f", x) }),
			row.Restored, row.Replayed,
			secs(row.CPU), secs(row.CPUvsOne),
			spreadText(row.Rate, thousands), rss)
	}
	if o.cold {
		w("\nMedian [min – max] over the rounds. Each step starts n instances at once, each with an empty data dir, into an empty group (every instance replaced at once); they restore their partitions from the changelog, and are stopped after the step's batch. ")
	} else {
		w("\nMedian [min – max] over the rounds. A round grows one group: the n-th instance starts, with an empty data dir, beside the n-1 already forwarding (for 1, into an empty group), and takes its partitions from them by the cooperative-sticky rebalance. ")
	}
	w("Last rebalance → every partition forwarding: from the last `partitions assigned` log line of any instance (as the harness read it) to the read, read_committed from the output, of the first probe written after it on the last partition to forward one; probes are written to every partition every %v, so the figure is ≥ the time they take through the group and is resolved to that interval. ", o.probeEvery)
	w("First release → every partition forwarding: from the first `partitions released` line of a running instance (the rebalance's start: cooperative-sticky takes the moving partitions away in a first rebalance and hands them out in a second) to the same moment; – for 1 instance. ")
	w("Worst probe wait: the longest a probe written during the step took from its write to its read: what a signal waited at worst, first rebalance (revocation) included. ")
	w("Settled: the group Stable with n members each assigned partitions, and every partition forwarding. ")
	w("CPU-s per M signals: the sum of the instances' utime+stime over the batch (t0: the group's first commit into it; t1: its commit of the last), over the signals committed in that window; signals/s over the same window; vs 1 instance: that figure over the 1-instance figure of the same round. ")
	w("Partitions restored / replayed: the new owners' `empty owner:` log lines, summed over the rounds (an owner that replays is the fallback when the changelog does not cover the partition).\n")
	for _, s := range r.Steps {
		if s.Err != "" {
			w("\n- round %d, %d instance(s) failed: %s\n", s.Round, s.N, oneLine(s.Err))
		}
	}
	return b.String()
}
