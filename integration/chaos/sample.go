package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/cohortgate/cohortgate/pkg/fanout"
)

// A soak sample is one scrape of the processor's /metrics: the figures
// that must stay flat under steady load, and the signals fetched so far
// for context.
type sample struct {
	at        time.Duration // since the soak's load started
	values    [len(soakMetrics)]float64
	signalsIn float64
}

// soakMetric is one figure the soak samples and judges: the series it
// sums (every label set of it), its CSV column, and how it is shown.
type soakMetric struct {
	column string
	series string
	// optional: the series may be absent (a gauge vector with no
	// children yet, such as the lag before any partition is owned), which
	// reads as 0. Otherwise absence is an error.
	optional bool
	unit     string  // "MiB" for bytes, "" for counts
	scale    float64 // shown value = value / scale
}

// soakMetrics are the soak's figures, in CSV and panel order. The
// Go runtime's and the process's series come from client_golang's Go and
// process collectors, which the processor registers.
var soakMetrics = [...]soakMetric{
	{column: "rss_bytes", series: "process_resident_memory_bytes", unit: "MiB", scale: 1 << 20},
	{column: "heap_inuse_bytes", series: "go_memstats_heap_inuse_bytes", unit: "MiB", scale: 1 << 20},
	{column: "goroutines", series: "go_goroutines", scale: 1},
	{column: "gate_members", series: fanout.MetricGateMembers, scale: 1},
	{column: "held_bytes", series: fanout.MetricHeldBytes, unit: "KiB", scale: 1 << 10},
	{column: "consumer_lag_records", series: fanout.MetricConsumerLag, optional: true, scale: 1},
}

// Indices into sample.values, for the rules that single one out.
const (
	metricRSS = iota
	metricHeap
	metricGoroutines
	metricGateMembers
	metricHeldBytes
	metricLag
)

// parseSample reads a Prometheus text exposition into a sample (at left
// zero). A series is the sum of all its label sets.
func parseSample(r io.Reader) (sample, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(r)
	if err != nil {
		return sample{}, fmt.Errorf("parsing /metrics: %w", err)
	}
	var s sample
	for i, m := range soakMetrics {
		v, ok := sumFamily(families[m.series])
		if !ok && !m.optional {
			return sample{}, fmt.Errorf("/metrics has no %s", m.series)
		}
		s.values[i] = v
	}
	s.signalsIn, _ = sumFamily(families[fanout.MetricSignalsIn])
	return s, nil
}

// sumFamily adds up the values of every series of f (gauges, counters and
// untyped); ok is false when f is missing or has no series.
func sumFamily(f *dto.MetricFamily) (sum float64, ok bool) {
	if f == nil {
		return 0, false
	}
	for _, m := range f.GetMetric() {
		switch {
		case m.Gauge != nil:
			sum += m.Gauge.GetValue()
		case m.Counter != nil:
			sum += m.Counter.GetValue()
		case m.Untyped != nil:
			sum += m.Untyped.GetValue()
		default:
			continue
		}
		ok = true
	}
	return sum, ok
}

// scrape samples the instance's /metrics.
func (in *instance) scrape(ctx context.Context) (sample, error) {
	code, body, err := in.get(ctx, "/metrics")
	if err != nil {
		return sample{}, fmt.Errorf("%s: /metrics: %w", in.name, err)
	}
	if code != http.StatusOK {
		return sample{}, fmt.Errorf("%s: /metrics: status %d", in.name, code)
	}
	return parseSample(bytes.NewReader(body))
}

// csvHeader is the first line of the soak's CSV.
func csvHeader() []string {
	h := []string{"t_seconds"}
	for _, m := range soakMetrics {
		h = append(h, m.column)
	}
	return append(h, "signals_in_total")
}

// sampleWriter writes the soak's samples as CSV as they are taken: a
// header, then one row a sample, values as the processor reported them
// (bytes, counts). Each row is flushed, so a run cut short keeps every
// sample it took.
type sampleWriter struct{ cw *csv.Writer }

// newSampleWriter writes the header to w.
func newSampleWriter(w io.Writer) (*sampleWriter, error) {
	sw := &sampleWriter{cw: csv.NewWriter(w)}
	if err := sw.cw.Write(csvHeader()); err != nil {
		return nil, err
	}
	sw.cw.Flush()
	return sw, sw.cw.Error()
}

// write writes s's row.
func (sw *sampleWriter) write(s sample) error {
	if err := sw.cw.Write(s.csvRow()); err != nil {
		return err
	}
	sw.cw.Flush()
	return sw.cw.Error()
}

// csvRow is s as a row of the CSV.
func (s sample) csvRow() []string {
	num := func(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
	row := []string{num(s.at.Seconds())}
	for _, v := range s.values {
		row = append(row, num(v))
	}
	return append(row, num(s.signalsIn))
}

// readCSV reads what a sampleWriter wrote, to draw or judge a kept run again.
func readCSV(r io.Reader) ([]sample, error) {
	rows, err := csv.NewReader(r).ReadAll()
	if err != nil {
		return nil, err
	}
	want := csvHeader()
	if len(rows) == 0 || fmt.Sprint(rows[0]) != fmt.Sprint(want) {
		return nil, fmt.Errorf("soak CSV: header is not %v", want)
	}
	out := make([]sample, 0, len(rows)-1)
	for i, row := range rows[1:] {
		var f [len(soakMetrics) + 2]float64
		for j, cell := range row {
			if f[j], err = strconv.ParseFloat(cell, 64); err != nil {
				return nil, fmt.Errorf("soak CSV: row %d, %s: %w", i+2, want[j], err)
			}
		}
		s := sample{at: time.Duration(f[0] * float64(time.Second)), signalsIn: f[len(f)-1]}
		copy(s.values[:], f[1:])
		out = append(out, s)
	}
	return out, nil
}
