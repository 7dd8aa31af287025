package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestParseCrashMetrics: the commands applied are summed over their
// series; the gate's members are read; an exposition without them is an
// error, not a gate of 0 members.
func TestParseCrashMetrics(t *testing.T) {
	text := `# HELP cohortgate_commands_applied_total Membership commands applied, by op and whether they changed state.
# TYPE cohortgate_commands_applied_total counter
cohortgate_commands_applied_total{op="leave",result="changed"} 8000
cohortgate_commands_applied_total{op="leave",result="duplicate"} 445
cohortgate_commands_applied_total{op="rejoin",result="changed"} 1e+01
# TYPE cohortgate_gate_members gauge
cohortgate_gate_members 1.018485e+06
cohortgate_gate_memory_bytes 3.5e+07
`
	m, err := parseCrashMetrics(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if m.commands != 8455 || m.members != 1_018_485 {
		t.Errorf("got %+v; want 8455 commands, 1018485 members", m)
	}
	if _, err := parseCrashMetrics(strings.NewReader("cohortgate_commands_applied_total 3\n")); err == nil {
		t.Error("no gate members read without an error")
	}
}

// TestCloneDataDir: the clone holds the store (tables linked, the other
// files copied, the lock left out), the snapshot and the broker log, and
// nothing the clone then writes reaches the source.
func TestCloneDataDir(t *testing.T) {
	src, dst := filepath.Join(t.TempDir(), "src"), filepath.Join(t.TempDir(), "dst")
	files := map[string]string{
		"membership/000005.sst":     "table",
		"membership/000006.log":     "wal",
		"membership/MANIFEST-00001": "manifest",
		"membership/LOCK":           "",
		"embedded-kafka/t/0.log":    "broker",
		snapshotFile:                "snapshot",
		"instance-id":               "someone",
	}
	for name, body := range files {
		p := filepath.Join(src, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(filepath.Join(dst, "stale"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := cloneDataDir(src, dst); err != nil {
		t.Fatal(err)
	}
	for name, body := range files {
		b, err := os.ReadFile(filepath.Join(dst, name))
		switch name {
		case "membership/LOCK", "instance-id":
			if err == nil {
				t.Errorf("%s was cloned", name)
			}
			continue
		}
		if err != nil || string(b) != body {
			t.Errorf("%s: %q, %v; want %q", name, b, err, body)
		}
	}
	if _, err := os.Stat(filepath.Join(dst, "stale")); err == nil {
		t.Error("what dst held before stayed")
	}
	inode := func(p string) uint64 {
		st, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		return st.Sys().(*syscall.Stat_t).Ino
	}
	for name, linked := range map[string]bool{"membership/000005.sst": true, snapshotFile: true,
		"membership/000006.log": false, "membership/MANIFEST-00001": false, "embedded-kafka/t/0.log": false} {
		if same := inode(filepath.Join(src, name)) == inode(filepath.Join(dst, name)); same != linked {
			t.Errorf("%s: linked %v; want %v", name, same, linked)
		}
	}
	// The clone's WAL grows; the source's does not.
	f, err := os.OpenFile(filepath.Join(dst, "membership/000006.log"), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("more")
	f.Close()
	if b, _ := os.ReadFile(filepath.Join(src, "membership/000006.log")); string(b) != "wal" {
		t.Errorf("the source's WAL became %q", b)
	}
}

// TestRegateLine: the count of commands a start applies again is read
// from the processor's line, and no other line matches.
func TestRegateLine(t *testing.T) {
	for line, want := range map[string]string{
		`time=2026-12-07T05:42:20.378Z level=INFO msg="gate snapshot older than the store: applying the commands since it again before forwarding" partitions=6 commands=8445`: "8445",
		`time=2026-12-07T05:42:20.378Z level=INFO msg="restored membership state" members=1010040 episodes=0 took=61ms scan=0s source=snapshot`:                                "",
	} {
		got := ""
		if m := regateLine.FindStringSubmatch(line); m != nil {
			got = m[1]
		}
		if got != want {
			t.Errorf("%s: %q; want %q", line, got, want)
		}
	}
}
