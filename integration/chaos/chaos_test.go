package main

import (
	"bytes"
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// lockedBuffer is a bytes.Buffer safe for the harness's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestKillScenarioEndToEnd builds the processor with the race detector
// and runs a tiny kill scenario of the friendly load against the
// in-process kfake broker: two processors, two kill -9 rounds, then the
// oracle, which must find every expected signal once and nothing else.
func TestKillScenarioEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the processor and runs it for about half a minute")
	}
	bin := filepath.Join(t.TempDir(), "processor")
	buildCtx, cancelBuild := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancelBuild()
	if out, err := exec.CommandContext(buildCtx, "go", "build", "-race", "-o", bin, "../../cmd/processor").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	// The scenario itself is bounded by --timeout; the context is a
	// backstop.
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var out, log lockedBuffer
	start := time.Now()
	err := run(ctx, []string{
		"--processor", bin,
		"--scenarios", "kill",
		"--signals", "3000", "--users", "300",
		"--leave-pct", "10", "--rejoin-pct", "3",
		"--rounds", "2",
		// Every kill of a settled group: kfake, unlike Kafka, may hold a
		// rebalance for the whole rebalance timeout (60s) when a member
		// dies during it.
		"--unsettled-kills", "0",
		"--partitions", "4",
		"--timeout", "55s",
		"--verify-grace", "5s",
		"--hostile=false",
		"--work-dir", t.TempDir(),
	}, &out, &log)
	took := time.Since(start)
	t.Logf("took %v\n%s", took, out.String())
	if err != nil {
		t.Fatalf("chaos: %v\nlog:\n%s", err, log.String())
	}
	table := out.String()
	if !strings.Contains(table, "chaos: PASS: 1 scenarios") {
		t.Fatalf("no PASS line:\n%s\nlog:\n%s", table, log.String())
	}
	var row, row2 []string
	lines := strings.Split(table, "\n")
	for i, line := range lines {
		if f := strings.Fields(line); len(f) == 12 && f[0] == "kill" && i+1 < len(lines) {
			row, row2 = f, strings.Fields(lines[i+1])
		}
	}
	// scenario signals_in forwarded expected duplicates lost leaked late hanging dlq seconds stall
	if row == nil || row[1] != "3000" || row[2] != row[3] || row[3] == "0" || row[4] != "0" || row[5] != "0" || row[6] != "0" || row[8] != "0" {
		t.Fatalf("kill row %q", row)
	}
	// poison unrouted unknown changelog win_miss win_spur win_cons contra
	if strings.Join(row2, " ") != "0 0 0 0 0 0 0 0" {
		t.Fatalf("kill row, second line %q", row2)
	}
	if took > 60*time.Second {
		t.Errorf("the tiny scenario took %v, more than a minute", took)
	}
}

// TestRecreateScenarioEndToEnd runs a tiny recreate scenario of the
// friendly load against the in-process broker: the commands topic deleted
// and created again while the processors are stopped, a start over an old
// data dir refused, then every processor started with an empty data dir.
// The oracle must find every expected signal once and nothing else,
// recreate's signals of fresh users included.
func TestRecreateScenarioEndToEnd(t *testing.T) {
	topicScenarioEndToEnd(t, "recreate", "refused, exit status", "empty data directory")
}

// TestRepartitionScenarioEndToEnd runs a tiny repartition scenario (the
// inputs grown before the commands). With a race-built harness and
// processor, seed 1, it found a partition beyond the old count that a
// second instance claimed and did not restore: users 184, 233 and 87 had
// left before the growth and their signals were forwarded after it (four
// runs of five, before a partition read under another count was taken
// for stale whatever it judged).
func TestRepartitionScenarioEndToEnd(t *testing.T) {
	topicScenarioEndToEnd(t, "repartition", "grow ", "every processor not ready")
}

// topicScenarioEndToEnd builds the processor with the race detector and
// runs one tiny scenario of the friendly load on the in-process broker,
// 2 partitions (4 once grown); its row must show no damage, and the log
// must hold each of logs.
func topicScenarioEndToEnd(t *testing.T, name string, logs ...string) {
	if testing.Short() {
		t.Skip("builds the processor and runs it for about a minute")
	}
	bin := filepath.Join(t.TempDir(), "processor")
	buildCtx, cancelBuild := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancelBuild()
	if out, err := exec.CommandContext(buildCtx, "go", "build", "-race", "-o", bin, "../../cmd/processor").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var out, log lockedBuffer
	err := run(ctx, []string{
		"--processor", bin,
		"--scenarios", name,
		"--grow-inputs-first",
		"--signals", "3000", "--users", "300",
		"--leave-pct", "10", "--rejoin-pct", "3",
		"--partitions", "2",
		"--timeout", "100s",
		"--verify-grace", "5s",
		"--hostile=false",
		"--work-dir", t.TempDir(),
	}, &out, &log)
	t.Logf("%s", out.String())
	if err != nil {
		t.Fatalf("chaos: %v\nlog:\n%s", err, log.String())
	}
	table := out.String()
	if !strings.Contains(table, "chaos: PASS: 1 scenarios") {
		t.Fatalf("no PASS line:\n%s\nlog:\n%s", table, log.String())
	}
	for _, want := range logs {
		if !strings.Contains(log.String(), want) {
			t.Errorf("the log lacks %q:\n%s", want, log.String())
		}
	}
	var row []string
	for _, line := range strings.Split(table, "\n") {
		if f := strings.Fields(line); len(f) == 12 && f[0] == name {
			row = f
		}
	}
	// scenario signals_in forwarded expected duplicates lost leaked late hanging dlq seconds stall
	if row == nil || row[2] != row[3] || row[3] == "0" || row[4] != "0" || row[5] != "0" || row[6] != "0" || row[8] != "0" {
		t.Errorf("%s row %q", name, row)
	}
}
