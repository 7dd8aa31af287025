package main

import (
	"math"
	"slices"
	"time"
)

// percentile returns the p-th percentile (0 < p ≤ 100) of sorted, which
// must be in ascending order, by the nearest-rank method: the smallest value
// such that at least p percent of the values are at or below it. p ≤ 0
// gives the minimum; an empty slice gives 0.
func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	rank := int(math.Ceil(p / 100 * float64(len(sorted))))
	rank = max(1, min(rank, len(sorted)))
	return sorted[rank-1]
}

// summary is the distribution of a set of durations.
type summary struct {
	N                        int
	Min, P50, P99, P999, Max time.Duration
}

// summarize sorts ds in place and summarizes them.
func summarize(ds []time.Duration) summary {
	slices.Sort(ds)
	if len(ds) == 0 {
		return summary{}
	}
	return summary{
		N:    len(ds),
		Min:  ds[0],
		P50:  percentile(ds, 50),
		P99:  percentile(ds, 99),
		P999: percentile(ds, 99.9),
		Max:  ds[len(ds)-1],
	}
}

// ratio returns a/b, or NaN when b is 0.
func ratio(a, b float64) float64 {
	if b == 0 {
		return math.NaN()
	}
	return a / b
}
