package main

import (
	"io"
	"strings"
	"testing"
	"time"
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
		{"hostile", []string{"--hostile", "--hostile-shares", "txn-held=2,poison=1", "--grace", "200ms"}, ""},
		{"hostile flags without --hostile are ignored", []string{"--hostile-scenes", "0"}, ""},
		{"hostile without scenes", []string{"--hostile", "--hostile-scenes", "0"}, "--hostile-scenes"},
		{"an unknown kind of scene", []string{"--hostile", "--hostile-shares", "nosuch=1"}, "--hostile-shares"},
		{"a hold too short to leak", []string{"--hostile", "--grace", "3s", "--hold", "5s"}, "Hold"},
		{"records too large", []string{"--hostile", "--large-bytes", "2000000"}, "LargeBytes"},
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

// TestParseHostile checks what --hostile makes of its flags.
func TestParseHostile(t *testing.T) {
	o, err := parse([]string{"--hostile", "--hostile-scenes", "5", "--hostile-shares", "future=1", "--grace", "300ms",
		"--commands-topic", "c"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	h := o.cfg.Hostile
	if !o.hostile || h.Scenes != 5 || h.Shares.String() != "future=1" || h.Grace != 300*time.Millisecond || o.txnID != "cohortgate-loadgen-c" {
		t.Fatalf("options %+v, hostile %+v", o, h)
	}
	o, err = parse(nil, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.hostile || o.cfg.Hostile.Scenes != 0 {
		t.Fatalf("the hostile mix is on by default: %+v", o.cfg.Hostile)
	}
}
