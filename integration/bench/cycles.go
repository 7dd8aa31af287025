package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/cohortgate/cohortgate/pkg/fanout"
)

// cycleCount is how many processing cycles (transactions, or flush+commit
// rounds) a child has ended, and, for the passthrough, the seconds spent
// ending them.
type cycleCount struct {
	cycles, endSeconds float64
}

// scrapeCycles reads a child's cycle counts from its /metrics: the
// processor's cohortgate_transactions_total (every outcome) or the
// passthrough's own series.
func scrapeCycles(ctx context.Context, base string) (cycleCount, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/metrics", nil)
	if err != nil {
		return cycleCount{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return cycleCount{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return cycleCount{}, fmt.Errorf("%s/metrics: %s", base, resp.Status)
	}
	return parseCycles(resp.Body)
}

// parseCycles sums the cycle series of a Prometheus text exposition.
func parseCycles(r io.Reader) (cycleCount, error) {
	var c cycleCount
	err := eachSample(r, func(line, name string, value float64) error {
		switch name {
		case fanout.MetricTransactions, metricPassthroughCycles:
			c.cycles += value
		case metricPassthroughEndSeconds:
			c.endSeconds += value
		}
		return nil
	})
	return c, err
}

// eachSample calls fn with every sample line of a Prometheus text
// exposition, its metric name and its value, until fn fails.
func eachSample(r io.Reader, fn func(line, name string, value float64) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		name, value, ok := metricLine(line)
		if !ok {
			continue
		}
		if err := fn(line, name, value); err != nil {
			return err
		}
	}
	return sc.Err()
}

// metricLine splits a sample line "name{labels} value" into the name and
// the value; comments and malformed lines give ok false.
func metricLine(line string) (name string, value float64, ok bool) {
	if line == "" || line[0] == '#' {
		return "", 0, false
	}
	i := strings.LastIndexByte(line, ' ')
	if i < 0 {
		return "", 0, false
	}
	v, err := strconv.ParseFloat(line[i+1:], 64)
	if err != nil {
		return "", 0, false
	}
	name = line[:i]
	if j := strings.IndexByte(name, '{'); j >= 0 {
		name = name[:j]
	}
	return strings.TrimSpace(name), v, true
}
