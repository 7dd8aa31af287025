package main

import (
	"fmt"
	"io"
	"math"
	"strings"
)

// flatRule is how one soak metric is judged. See the package
// documentation, "Soak", for the rule in words.
type flatRule struct {
	// floor and rel bound the growth: the least-squares slope over the
	// second half of the run, extrapolated over the whole run, may not
	// exceed max(floor, rel × the second half's mean). floor is in the
	// metric's own unit (bytes, records, goroutines).
	// Noise is allowed for: growth counts less two standard errors of
	// the slope (× the run), so a short run's sawtooth (the heap between
	// collections) fails only on growth it shows with confidence, while an
	// hour's hundreds of samples leave little room.
	floor, rel float64
	// capped: the metric is state that grows by design with the users
	// who left (the gate keeps one entry per user who ever left, and the
	// soak's leaves are spread over the whole run), so it is judged by its
	// bound instead: its maximum may not exceed the cap soakCaps gives.
	capped bool
}

// flatRules are the rules of soakMetrics, index for index.
var flatRules = [len(soakMetrics)]flatRule{
	metricRSS:         {floor: 32 << 20, rel: 0.20},
	metricHeap:        {floor: 16 << 20, rel: 0.20},
	metricGoroutines:  {floor: 20, rel: 0.20},
	metricGateMembers: {capped: true},
	metricHeldBytes:   {floor: 4 << 20, rel: 0.50},
	metricLag:         {floor: 20_000, rel: 0.50},
}

// minWarmSamples is the fewest second-half samples a slope is fitted to.
const minWarmSamples = 3

// flatness is the verdict on one metric of a soak.
type flatness struct {
	metric             soakMetric
	first, last, max   float64 // over the whole run
	slopePerMin        float64 // least squares over the second half
	growth, bound      float64 // growth: slope × the run's length
	noise              float64 // two standard errors of growth
	flat               bool
	rule               string // the bound in words, or why it failed
	warmSamples, total int
}

// judgeFlat judges each soak metric over samples (in time order). caps
// gives the bound of each capped metric (by index); widen multiplies the
// floor and the share of every other rule (1: the rules as stated; a
// run of a few minutes, mostly warm-up, is judged with wider ones).
func judgeFlat(samples []sample, caps map[int]float64, widen float64) []flatness {
	out := make([]flatness, len(soakMetrics))
	if len(samples) == 0 {
		for i, m := range soakMetrics {
			out[i] = flatness{metric: m, rule: "no samples"}
		}
		return out
	}
	runMin := (samples[len(samples)-1].at - samples[0].at).Minutes()
	for i, m := range soakMetrics {
		f := flatness{metric: m, first: samples[0].values[i], last: samples[len(samples)-1].values[i],
			max: math.Inf(-1), total: len(samples)}
		for _, s := range samples {
			f.max = math.Max(f.max, s.values[i])
		}
		ts, vs := secondHalf(samples, i)
		var sum float64
		for _, v := range vs {
			sum += v
		}
		f.warmSamples = len(vs)
		line := fitXY(ts, vs)
		f.slopePerMin = line.slope
		f.growth = f.slopePerMin * runMin
		f.noise = 2 * line.se * runMin
		rule := flatRules[i]
		rule.floor, rule.rel = rule.floor*widen, rule.rel*widen
		switch {
		case rule.capped:
			c, ok := caps[i]
			f.bound = c
			f.flat = ok && f.max <= c
			f.rule = fmt.Sprintf("max ≤ %s (users who may leave)", m.show(c))
			if !ok {
				f.rule = "no cap given"
			}
		case len(vs) < minWarmSamples:
			f.rule = fmt.Sprintf("too few samples in the second half (%d, want %d)", len(vs), minWarmSamples)
		default:
			mean := sum / float64(len(vs))
			f.bound = math.Max(rule.floor, rule.rel*mean)
			f.flat = f.growth-f.noise <= f.bound
			f.rule = fmt.Sprintf("growth − noise ≤ max(%s, %.0f%% of mean %s)", m.show(rule.floor), 100*rule.rel, m.show(mean))
		}
		out[i] = f
	}
	return out
}

// secondHalf returns the times (minutes since the load started) and the
// values of metric i of the samples in the second half of the run: the
// warm part, which the flatness rule judges.
func secondHalf(samples []sample, i int) (ts, vs []float64) {
	if len(samples) == 0 {
		return nil, nil
	}
	start, end := samples[0].at, samples[len(samples)-1].at
	half := start + (end-start)/2
	for _, s := range samples {
		if s.at >= half {
			ts, vs = append(ts, s.at.Minutes()), append(vs, s.values[i])
		}
	}
	return ts, vs
}

// fit is a least-squares line y = mean.y + slope·(x − mean.x), with the
// standard error of its slope.
type fit struct {
	meanX, meanY float64
	slope, se    float64
}

// fitXY fits ys over xs by least squares. With fewer than two distinct
// xs the slope is 0; with fewer than three points its error is 0.
func fitXY(xs, ys []float64) fit {
	n := float64(len(xs))
	if len(xs) < 2 || len(xs) != len(ys) {
		return fit{}
	}
	var f fit
	for i := range xs {
		f.meanX += xs[i]
		f.meanY += ys[i]
	}
	f.meanX, f.meanY = f.meanX/n, f.meanY/n
	var sxy, sxx float64
	for i := range xs {
		sxy += (xs[i] - f.meanX) * (ys[i] - f.meanY)
		sxx += (xs[i] - f.meanX) * (xs[i] - f.meanX)
	}
	if sxx == 0 {
		return f
	}
	f.slope = sxy / sxx
	if len(xs) > 2 {
		var rss float64
		for i := range xs {
			r := ys[i] - f.meanY - f.slope*(xs[i]-f.meanX)
			rss += r * r
		}
		f.se = math.Sqrt(rss / (n - 2) / sxx)
	}
	return f
}

// show formats v in m's unit.
func (m soakMetric) show(v float64) string {
	if m.unit == "" {
		return fmt.Sprintf("%.0f", v)
	}
	return fmt.Sprintf("%.1f %s", v/m.scale, m.unit)
}

// allFlat reports whether every metric passed.
func allFlat(fs []flatness) bool {
	for _, f := range fs {
		if !f.flat {
			return false
		}
	}
	return len(fs) > 0
}

// notFlat names the metrics that failed.
func notFlat(fs []flatness) string {
	var names []string
	for _, f := range fs {
		if !f.flat {
			names = append(names, f.metric.column)
		}
	}
	return strings.Join(names, ", ")
}

// flatFormat is a row of the verdict table.
const flatFormat = "%-22s %12s %12s %12s %14s %14s %12s %12s  %s\n"

// printFlat writes the verdict table.
func printFlat(w io.Writer, fs []flatness) {
	fmt.Fprintf(w, flatFormat, "metric", "first", "last", "max", "slope/min", "growth/run", "noise", "bound", "verdict")
	for _, f := range fs {
		m := f.metric
		verdict := "flat"
		if !f.flat {
			verdict = "NOT FLAT"
		}
		fmt.Fprintf(w, flatFormat, m.column, m.show(f.first), m.show(f.last), m.show(f.max),
			m.showSigned(f.slopePerMin), m.showSigned(f.growth), "±"+m.show(f.noise), m.show(f.bound), verdict+": "+f.rule)
	}
}

// showSigned formats a change in m's unit, with its sign.
func (m soakMetric) showSigned(v float64) string {
	if m.unit == "" {
		return fmt.Sprintf("%+.1f", v)
	}
	return fmt.Sprintf("%+.2f %s", v/m.scale, m.unit)
}
