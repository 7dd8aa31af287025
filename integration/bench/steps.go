package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cohortgate/cohortgate/pkg/fanout"
)

// histogram is one Prometheus histogram series: cumulative counts by upper
// bound (le, ascending, +Inf last), the sum and the count.
type histogram struct {
	le, cum    []float64
	sum, count float64
}

// minus returns h less an earlier reading o of the same series: what was
// observed in between.
func (h histogram) minus(o histogram) histogram {
	d := histogram{le: h.le, cum: slices.Clone(h.cum), sum: h.sum - o.sum, count: h.count - o.count}
	if len(o.cum) == len(h.cum) {
		for i := range d.cum {
			d.cum[i] -= o.cum[i]
		}
	}
	return d
}

// plus returns h and o of the same series summed: what both observed.
func (h histogram) plus(o histogram) histogram {
	switch {
	case len(o.le) == 0:
		return h
	case len(h.le) == 0:
		return o
	}
	d := histogram{le: h.le, cum: slices.Clone(h.cum), sum: h.sum + o.sum, count: h.count + o.count}
	if len(o.cum) == len(h.cum) {
		for i := range d.cum {
			d.cum[i] += o.cum[i]
		}
	}
	return d
}

// mean is the mean observation, NaN when there is none.
func (h histogram) mean() float64 {
	if h.count <= 0 {
		return math.NaN()
	}
	return h.sum / h.count
}

// quantile estimates the q-quantile as Prometheus' histogram_quantile does:
// linear within the bucket it falls in; the highest finite bound if it
// falls in +Inf.
func (h histogram) quantile(q float64) float64 {
	if h.count <= 0 || len(h.le) == 0 {
		return math.NaN()
	}
	rank := q * h.count
	lower, below := 0.0, 0.0
	for i, le := range h.le {
		if h.cum[i] >= rank {
			if math.IsInf(le, 1) {
				return lower
			}
			in := h.cum[i] - below
			if in <= 0 {
				return le
			}
			return lower + (le-lower)*(rank-below)/in
		}
		lower, below = le, h.cum[i]
	}
	return lower
}

// stepSeries names the histograms of where a leave's time goes: the
// commands' fetch delay, then each step of a commands batch.
func stepSeries() []string {
	out := []string{fanout.MetricFetchDelay}
	for _, s := range []string{"wait", "recover", "apply", "gate", "settle", "commit", "sync"} {
		out = append(out, fanout.MetricBatchStep+"{"+s+"}")
	}
	return append(out, goSchedLatencies)
}

// goSchedLatencies is the Go runtime's histogram of how long goroutines
// waited runnable before they ran, every goroutine of the processor's:
// where a leave waits when the cores are saturated.
const goSchedLatencies = "go_sched_latencies_seconds"

// scrapeHistograms reads the processor's histograms of stepSeries from
// base/metrics, keyed as stepSeries names them.
func scrapeHistograms(ctx context.Context, base string) (map[string]histogram, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s/metrics: %s", base, resp.Status)
	}
	return parseHistograms(resp.Body)
}

// parseHistograms reads the stepSeries histograms of a Prometheus text
// exposition.
func parseHistograms(r io.Reader) (map[string]histogram, error) {
	out := make(map[string]histogram)
	err := eachSample(r, func(line, name string, value float64) error {
		var base, suffix string
		for _, s := range []string{"_bucket", "_sum", "_count"} {
			if b, ok := strings.CutSuffix(name, s); ok {
				base, suffix = b, s
			}
		}
		if base != fanout.MetricFetchDelay && base != fanout.MetricBatchStep && base != goSchedLatencies {
			return nil
		}
		key := base
		if step := label(line, "step"); step != "" {
			key += "{" + step + "}"
		}
		h := out[key]
		switch suffix {
		case "_sum":
			h.sum = value
		case "_count":
			h.count = value
		case "_bucket":
			le, err := strconv.ParseFloat(label(line, "le"), 64)
			if err != nil {
				return fmt.Errorf("bucket without a bound: %q", line)
			}
			h.le, h.cum = append(h.le, le), append(h.cum, value)
		}
		out[key] = h
		return nil
	})
	return out, err
}

// label returns the value of label name in a sample line, "" if absent.
func label(line, name string) string {
	_, rest, ok := strings.Cut(line, name+`="`)
	if !ok {
		return ""
	}
	v, _, _ := strings.Cut(rest, `"`)
	return v
}

// stepFigures are one series' observations over the leaves' span.
type stepFigures struct {
	Name                string
	Count               float64
	Mean, P50, P99, Max float64 // seconds; Max: the bound of the highest bucket reached
}

// stepsBetween returns, per stepSeries, what was observed between two
// readings.
func stepsBetween(before, after map[string]histogram) []stepFigures {
	var out []stepFigures
	for _, name := range stepSeries() {
		h := after[name].minus(before[name])
		out = append(out, stepFigures{Name: name, Count: h.count, Mean: h.mean(), P50: h.quantile(0.5), P99: h.quantile(0.99), Max: h.quantile(1)})
	}
	return out
}
