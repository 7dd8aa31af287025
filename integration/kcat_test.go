package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"
)

// kcatPath finds kcat. CI sets COHORTGATE_REQUIRE_KCAT=1 so that a missing
// kcat fails the run instead of skipping the foreign-client tests.
func kcatPath(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("kcat")
	if err != nil {
		if os.Getenv("COHORTGATE_REQUIRE_KCAT") == "1" {
			t.Fatalf("kcat is required: %v", err)
		}
		t.Skip("kcat not installed (Debian: apt-get install kcat)")
	}
	return path
}

// kcat runs kcat against the test broker with stdin, returning stdout.
func kcat(t *testing.T, stdin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, kcatPath(t), append([]string{"-b", strings.Join(broker.addrs, ",")}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("kcat %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out)
}

// TestKcatForeignClient uses kcat, a librdkafka client, as producers and
// the downstream consumer would: it publishes signals and a leave command
// (no at_ns: the record timestamp is the boundary) and reads the cohort
// topic with isolation.level=read_committed.
func TestKcatForeignClient(t *testing.T) {
	kcatPath(t)
	e := newEnv(t, 3)
	b := e.runBinary(t.TempDir())
	b.waitReady(t)

	produce := func(topic, delim, lines string) {
		kcat(t, lines, "-P", "-t", topic, "-K"+delim, "-X", "partitioner=murmur2_random")
	}
	produce(string(e.set.Signals), ":", "1:before-1\n2:before-2\n")
	produce(string(e.set.Commands), "|", `1|{"op":"leave","user_id":1,"request_id":"kcat-1"}`+"\n")
	eventually(t, 60*time.Second, func() error {
		_, body, err := b.get("/v1/members/1")
		if err != nil || !strings.Contains(body, `"status": "left"`) {
			return fmt.Errorf("leave not applied yet: %v %s", err, body)
		}
		return nil
	})
	produce(string(e.set.Signals), ":", "1:after-1\n2:after-2\n")
	e.waitDecided()

	out := kcat(t, "", "-C", "-t", string(e.set.Cohort), "-e", "-q",
		"-X", "isolation.level=read_committed", "-f", "%k:%s\n")
	got := strings.Fields(out)
	slices.Sort(got)
	want := []string{"1:before-1", "2:after-2", "2:before-2"}
	if !slices.Equal(got, want) {
		t.Fatalf("kcat read from %s:\n%v\nwant\n%v", e.set.Cohort, got, want)
	}
}
