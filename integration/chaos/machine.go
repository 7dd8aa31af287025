package main

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
)

// peakRSS is this process's peak resident set (the oracle's judging
// dominates it after a soak), or "unknown".
func peakRSS() string {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil || ru.Maxrss <= 0 {
		return "unknown"
	}
	return fmt.Sprintf("%.0f MiB", float64(ru.Maxrss)/1024) // kilobytes on Linux
}

// loadAverage is the machine's one-minute load average, from
// /proc/loadavg; ok is false where there is none. The soak records it: the
// machine may be shared, and a busy one shows in the metrics.
func loadAverage() (float64, bool) {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0, false
	}
	return parseLoadAverage(string(b))
}

// parseLoadAverage reads the first field of /proc/loadavg.
func parseLoadAverage(s string) (float64, bool) {
	f := strings.Fields(s)
	if len(f) == 0 {
		return 0, false
	}
	v, err := strconv.ParseFloat(f[0], 64)
	return v, err == nil
}

// spread renders figures as "median M (min m, max x)".
func spread(xs []float64) string {
	s := slices.Sorted(slices.Values(xs))
	return fmt.Sprintf("median %.2f (min %.2f, max %.2f)", s[len(s)/2], s[0], s[len(s)-1])
}
