package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// cpuTicks is a process's CPU time in clock ticks (see userHZ): user
// plus system, of every thread, as /proc/<pid>/stat reports it. Children
// the process waited for are not included.
type cpuTicks uint64

// parseStat returns utime+stime from the content of /proc/<pid>/stat.
//
// The second field, the command name, is in parentheses and may itself
// contain spaces and parentheses, so the fields are counted from the last
// ')': after it come state (field 3), ..., utime (14) and stime (15), as
// proc(5) numbers them.
func parseStat(stat []byte) (cpuTicks, error) {
	end := bytes.LastIndexByte(stat, ')')
	if end < 0 {
		return 0, errors.New("stat: no ')' after the command name")
	}
	fields := strings.Fields(string(stat[end+1:]))
	const utime, stime = 14 - 3, 15 - 3 // indices in fields, which starts at field 3
	if len(fields) <= stime {
		return 0, fmt.Errorf("stat: %d fields after the command name, want at least %d", len(fields), stime+1)
	}
	u, err := strconv.ParseUint(fields[utime], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("stat: utime: %w", err)
	}
	s, err := strconv.ParseUint(fields[stime], 10, 64)
	if err != nil {
		return 0, fmt.Errorf("stat: stime: %w", err)
	}
	return cpuTicks(u + s), nil
}

// parseStatusKB returns the value, in bytes, of a "Name:   123 kB" line of
// the content of /proc/<pid>/status, e.g. VmHWM (peak resident set) or
// VmRSS.
func parseStatusKB(status []byte, name string) (int64, error) {
	sc := bufio.NewScanner(bytes.NewReader(status))
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, name+":")
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		if len(f) != 2 || f[1] != "kB" {
			return 0, fmt.Errorf("status: %s: unexpected %q", name, line)
		}
		kb, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil {
			return 0, fmt.Errorf("status: %s: %w", name, err)
		}
		return kb << 10, nil
	}
	return 0, fmt.Errorf("status: no %s line", name)
}

// procCPU reads pid's CPU ticks.
func procCPU(pid int) (cpuTicks, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return parseStat(b)
}

// procPeakRSS reads pid's peak resident set size (VmHWM) in bytes.
func procPeakRSS(pid int) (int64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	return parseStatusKB(b, "VmHWM")
}

// userHZ is the unit of the CPU times in /proc (cpuTicks, systemCPU):
// clock ticks per second, sysconf(_SC_CLK_TCK). The kernel fixes USER_HZ
// at 100 in its ABI on every architecture Go runs Linux on, whatever the
// kernel's own HZ.
const userHZ = 100

// seconds converts ticks to seconds.
func (t cpuTicks) seconds() float64 { return float64(t) / userHZ }

// systemCPU is the machine's CPU time from the first line of /proc/stat, in
// clock ticks: busy (everything but idle and iowait) and total.
type systemCPU struct{ busy, total uint64 }

// parseSystemStat reads the aggregate "cpu" line of /proc/stat.
func parseSystemStat(stat []byte) (systemCPU, error) {
	line, _, _ := bytes.Cut(stat, []byte{'\n'})
	f := strings.Fields(string(line))
	if len(f) < 5 || f[0] != "cpu" {
		return systemCPU{}, fmt.Errorf("/proc/stat: unexpected first line %q", line)
	}
	var s systemCPU
	for i, v := range f[1:] {
		n, err := strconv.ParseUint(v, 10, 64)
		if err != nil {
			return systemCPU{}, fmt.Errorf("/proc/stat: %w", err)
		}
		if i >= 8 { // guest and guest_nice are already counted in user and nice
			break
		}
		s.total += n
		if i != 3 && i != 4 { // idle, iowait
			s.busy += n
		}
	}
	return s, nil
}

// readSystemCPU reads /proc/stat.
func readSystemCPU() (systemCPU, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return systemCPU{}, err
	}
	return parseSystemStat(b)
}

// parseSchedstat returns the time a thread ran on a CPU and the time it
// waited on a run queue for one, from the content of
// /proc/<pid>/task/<tid>/schedstat: "run_ns wait_ns timeslices"
// (the kernel's sched-stats documentation, version 15 and on).
func parseSchedstat(b []byte) (run, wait time.Duration, err error) {
	f := strings.Fields(string(b))
	if len(f) != 3 {
		return 0, 0, fmt.Errorf("schedstat: %d fields, want 3: %q", len(f), b)
	}
	r, err := strconv.ParseInt(f[0], 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("schedstat: run time: %w", err)
	}
	w, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("schedstat: wait time: %w", err)
	}
	return time.Duration(r), time.Duration(w), nil
}

// procRunWait is how long pid's threads alive now have waited on a run
// queue for a CPU, summed: time runnable but not running, the cost of
// cores shared with other work. A thread that exited takes its share
// with it, so compare two readings of long-lived threads (a Go program's
// stay).
func procRunWait(pid int) (time.Duration, error) {
	dir := fmt.Sprintf("/proc/%d/task", pid)
	tasks, err := os.ReadDir(dir)
	if err != nil {
		return 0, err
	}
	var sum time.Duration
	for _, t := range tasks {
		b, err := os.ReadFile(dir + "/" + t.Name() + "/schedstat")
		if errors.Is(err, os.ErrNotExist) {
			continue // the thread exited since the listing
		}
		if err != nil {
			return 0, err
		}
		_, w, err := parseSchedstat(b)
		if err != nil {
			return 0, fmt.Errorf("thread %s of %d: %w", t.Name(), pid, err)
		}
		sum += w
	}
	return sum, nil
}
