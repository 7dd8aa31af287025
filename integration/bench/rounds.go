package main

import (
	"math"
	"slices"
)

// The throughput runs are repeated in rounds (see throughputPhase); the
// report gives each figure as the median over the rounds with its min and
// max, and a ratio between two runs as the median of the per-round ratios,
// pairing the two runs of the same round (they ran minutes apart on the
// same machine), with the worst round deciding whether an aim is met.

// spread is one figure over the rounds.
type spread struct {
	N                int
	Median, Min, Max float64
}

// spreadOf summarizes xs, leaving out NaNs. The median of an even count is
// the mean of the middle two.
func spreadOf(xs []float64) spread {
	v := make([]float64, 0, len(xs))
	for _, x := range xs {
		if !math.IsNaN(x) {
			v = append(v, x)
		}
	}
	if len(v) == 0 {
		return spread{Median: math.NaN(), Min: math.NaN(), Max: math.NaN()}
	}
	slices.Sort(v)
	m := v[len(v)/2]
	if len(v)%2 == 0 {
		m = (v[len(v)/2-1] + v[len(v)/2]) / 2
	}
	return spread{N: len(v), Median: m, Min: v[0], Max: v[len(v)-1]}
}

// runSummary is one run (passthrough, processor-eos, ...) over the rounds.
type runSummary struct {
	Name                   string
	Failed                 int // rounds that failed
	CPU, Rate, PerCPU, RSS spread
	Forwarded, Duplicates  spread
	Window                 spread // seconds
}

// byRound indexes the successful throughput results: run → round → result.
func (r *results) byRound() map[string]map[int]throughputResult {
	out := make(map[string]map[int]throughputResult)
	for _, t := range r.Throughput {
		if t.Err != "" {
			continue
		}
		if out[t.Name] == nil {
			out[t.Name] = make(map[int]throughputResult)
		}
		out[t.Name][t.Round] = t
	}
	return out
}

// summaries summarizes every run that was done, in the order of allRuns.
func (r *results) summaries() []runSummary {
	var out []runSummary
	for _, name := range allRuns {
		var cpu, rate, per, rss, fwd, dup, win []float64
		s := runSummary{Name: name}
		seen := false
		for _, t := range r.Throughput {
			if t.Name != name {
				continue
			}
			seen = true
			if t.Err != "" {
				s.Failed++
				continue
			}
			cpu = append(cpu, t.CPUPerMillion())
			rate = append(rate, t.Rate)
			per = append(per, t.PerCPUSecond())
			rss = append(rss, float64(t.PeakRSS))
			fwd = append(fwd, float64(t.Out.Distinct))
			dup = append(dup, float64(t.Out.Duplicates))
			win = append(win, t.Window.Seconds())
		}
		if !seen {
			continue
		}
		s.CPU, s.Rate, s.PerCPU, s.RSS = spreadOf(cpu), spreadOf(rate), spreadOf(per), spreadOf(rss)
		s.Forwarded, s.Duplicates, s.Window = spreadOf(fwd), spreadOf(dup), spreadOf(win)
		out = append(out, s)
	}
	return out
}

// costRatio compares run X with run Y: how many times Y's CPU-seconds per
// million signals X spends (the headline), and how many times slower it
// is (Y's signals/s over X's). An aim applies to one of the two.
type costRatio struct {
	Label string
	X, Y  string
	// Aim: On is "cpu" or "rate"; AtMost says the ratio must stay at or
	// below Limit (else at or above); Why says what the aim compares.
	On     string
	AtMost bool
	Limit  float64
	Why    string
}

// ratioResult is a costRatio over the rounds.
type ratioResult struct {
	costRatio
	CPU, Rate spread
	Worst     float64 // of the aimed figure: the largest per-round ratio for an at-most aim, the smallest otherwise
	Met       string  // yes, no, or – (no aim, or not measured)
}

// costRatios are the ratios the report gives, aims first.
var costRatios = []costRatio{
	{Label: "streams-grace / processor-eos", X: runStreamsGrace, Y: runProcessorEOS, On: "cpu", Limit: 10, Why: "the peer with the same grace"},
	{Label: "processor-eos / passthrough-eos", X: runProcessorEOS, Y: runPassthroughEOS, On: "cpu", AtMost: true, Limit: 1.10, Why: "the cost over the exactly-once limit"},
	{Label: "streams / processor-eos", X: runStreams, Y: runProcessorEOS, On: "cpu", Limit: 2, Why: "the peer without a grace"},
	{Label: "processor-alo / passthrough", X: runProcessorALO, Y: runPassthrough, On: "rate", AtMost: true, Limit: 1 / 0.95, Why: "at least once, near the limit"},
	{Label: "processor-eos / passthrough", X: runProcessorEOS, Y: runPassthrough, On: "rate", AtMost: true, Limit: 1 / 0.90, Why: "exactly once, near the limit"},
	{Label: "passthrough-eos / passthrough", X: runPassthroughEOS, Y: runPassthrough},
	{Label: "streams-grace / streams", X: runStreamsGrace, Y: runStreams},
}

// ratios computes costRatios from the rounds in which both runs succeeded.
func (r *results) ratios() []ratioResult {
	idx := r.byRound()
	var out []ratioResult
	for _, c := range costRatios {
		xs, ys := idx[c.X], idx[c.Y]
		var cpu, rate []float64
		for round, x := range xs {
			y, ok := ys[round]
			if !ok {
				continue
			}
			cpu = append(cpu, ratio(x.CPUPerMillion(), y.CPUPerMillion()))
			rate = append(rate, ratio(y.Rate, x.Rate))
		}
		if len(cpu) == 0 {
			continue
		}
		res := ratioResult{costRatio: c, CPU: spreadOf(cpu), Rate: spreadOf(rate), Worst: math.NaN(), Met: "–"}
		aimed := res.CPU
		if c.On == "rate" {
			aimed = res.Rate
		}
		if c.On != "" && aimed.N > 0 {
			if c.AtMost {
				res.Worst, res.Met = aimed.Max, yesNo(aimed.Max <= c.Limit)
			} else {
				res.Worst, res.Met = aimed.Min, yesNo(aimed.Min >= c.Limit)
			}
		}
		out = append(out, res)
	}
	return out
}
