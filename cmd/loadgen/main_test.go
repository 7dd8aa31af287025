package main

import (
	"io"
	"strings"
	"testing"
)

// TestParse checks that loadgen refuses what the workload cannot make,
// naming the flag, and accepts its defaults.
func TestParse(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string // a substring of the error; empty: no error
	}{
		{"defaults", nil, ""},
		{"small load", []string{"--users", "10", "--signals", "100", "--leave-pct", "50", "--rejoin-pct", "10"}, ""},
		{"no users", []string{"--users", "0"}, "Users"},
		{"rejoiners beyond leavers", []string{"--leave-pct", "1", "--rejoin-pct", "2"}, "RejoinPct"},
		{"negative rate", []string{"--rate", "-1"}, "Rate"},
		{"no brokers", []string{"--brokers", " , "}, "--brokers"},
		{"zero replication", []string{"--replication-factor", "0"}, "--replication-factor"},
		{"same topic twice", []string{"--signals-topic", "x", "--commands-topic", "x"}, "topic flags"},
		{"stray argument", []string{"extra"}, "unexpected argument"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parse(tc.args, io.Discard)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("parse(%q): %v", tc.args, err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("parse(%q) = %v, want an error naming %q", tc.args, err, tc.want)
			}
		})
	}
}
