package main

import (
	"os"
	"testing"
	"time"
)

func TestParseStat(t *testing.T) {
	tests := []struct {
		name string
		stat string
		want cpuTicks
		bad  bool
	}{
		{
			name: "plain",
			stat: "4242 (processor) S 1 4242 4242 0 -1 4194560 9023 0 0 0 1500 250 0 0 20 0 12 0 9000 2147483648 25000 18446744073709551615 1 1 0 0 0 0 0 0 0 0 0 0 17 1 0 0 0 0 0\n",
			want: 1750,
		},
		{
			name: "command name with spaces and parentheses",
			stat: "77 (java (main) x) R 1 77 77 0 -1 0 0 0 0 0 3 4 0 0 20 0 1 0 1 1 1 1\n",
			want: 7,
		},
		{name: "no parenthesis", stat: "77 java R 1", bad: true},
		{name: "too short", stat: "77 (java) R 1 2 3", bad: true},
		{name: "not a number", stat: "77 (java) R 1 77 77 0 -1 0 0 0 0 0 x 4 0", bad: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseStat([]byte(tt.stat))
			if tt.bad {
				if err == nil {
					t.Fatalf("parseStat = %d, want an error", got)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("parseStat = %d, %v; want %d", got, err, tt.want)
			}
		})
	}
}

func TestParseStatusKB(t *testing.T) {
	status := "Name:\tprocessor\nVmPeak:\t 2200000 kB\nVmHWM:\t  123456 kB\nVmRSS:\t  100000 kB\n"
	got, err := parseStatusKB([]byte(status), "VmHWM")
	if err != nil || got != 123456<<10 {
		t.Fatalf("VmHWM = %d, %v; want %d", got, err, 123456<<10)
	}
	if _, err := parseStatusKB([]byte(status), "VmSwap"); err == nil {
		t.Fatal("missing VmSwap: want an error")
	}
	if _, err := parseStatusKB([]byte("VmHWM:\t12 MB\n"), "VmHWM"); err == nil {
		t.Fatal("unit MB: want an error")
	}
}

func TestParseSystemStat(t *testing.T) {
	// user nice system idle iowait irq softirq steal guest guest_nice
	got, err := parseSystemStat([]byte("cpu  100 5 50 1000 20 3 2 0 40 0\ncpu0 1 2 3 4\n"))
	if err != nil {
		t.Fatal(err)
	}
	if want := (systemCPU{busy: 160, total: 1180}); got != want {
		t.Fatalf("parseSystemStat = %+v, want %+v", got, want)
	}
	if _, err := parseSystemStat([]byte("intr 1 2 3\n")); err == nil {
		t.Fatal("no cpu line: want an error")
	}
}

func TestParseSchedstat(t *testing.T) {
	for _, tt := range []struct {
		in        string
		run, wait time.Duration
		bad       bool
	}{
		{in: "206287700 32973751 554\n", run: 206287700, wait: 32973751},
		{in: "0 0 0", run: 0, wait: 0},
		{in: "206287700 32973751", bad: true},
		{in: "206287700 x 554", bad: true},
		{in: "", bad: true},
	} {
		run, wait, err := parseSchedstat([]byte(tt.in))
		if tt.bad {
			if err == nil {
				t.Errorf("parseSchedstat(%q) = %v, %v; want an error", tt.in, run, wait)
			}
			continue
		}
		if err != nil || run != tt.run || wait != tt.wait {
			t.Errorf("parseSchedstat(%q) = %v, %v, %v; want %v, %v", tt.in, run, wait, err, tt.run, tt.wait)
		}
	}
}

// TestProcRunWait reads this process's own threads, where Linux keeps
// scheduler statistics.
func TestProcRunWait(t *testing.T) {
	if _, err := os.Stat("/proc/self/schedstat"); err != nil {
		t.Skipf("no scheduler statistics here: %v", err)
	}
	if _, err := procRunWait(os.Getpid()); err != nil {
		t.Fatal(err)
	}
}
