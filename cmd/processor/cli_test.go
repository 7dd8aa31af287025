package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/cohortgate/cohortgate/topics"
)

// freePort returns a loopback address nothing listens on now.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// tryProcessor runs `processor try` (its embedded broker) in this
// process until the test ends, and returns once it is ready: its Kafka,
// HTTP and API addresses and its data dir.
func tryProcessor(t *testing.T) (kafka, web, api, dataDir string) {
	t.Helper()
	kafka, web, api, dataDir = freePort(t), freePort(t), freePort(t), t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- dispatch(ctx, []string{"try", "--embedded-addr", kafka, "--http-addr", web, "--api-addr", api,
			"--data-dir", dataDir, "--grace", "10ms", "--log-level", "warn"}, io.Discard, io.Discard)
	}()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("processor run: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Error("processor run did not stop within 30s")
		}
	})
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get("http://" + web + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return kafka, web, api, dataDir
			}
		}
		select {
		case err := <-done:
			t.Fatalf("processor run ended before it was ready: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatal("processor not ready within 60s")
		}
	}
}

// TestCommands drives `processor leave|rejoin|status` against `processor
// try` (its embedded broker), all in this process: the commands are
// thin wrappers of pkg/client, and print what they printed before.
func TestCommands(t *testing.T) {
	kafka, web, api, dataDir := tryProcessor(t)

	// The build and the mode, on the metrics endpoint.
	resp, err := http.Get("http://" + web + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !regexp.MustCompile(`(?m)^cohortgate_build_info\{embedded="true",go="go[^"]+",revision="[^"]+",version="[^"]+"\} 1$`).Match(metrics) {
		t.Errorf("/metrics has no cohortgate_build_info of an embedded run:\n%s", grepLines(metrics, "build_info"))
	}

	cli := func(args ...string) string {
		t.Helper()
		var out, errs bytes.Buffer
		if err := dispatch(context.Background(), args, &out, &errs); err != nil {
			t.Fatalf("processor %s: %v\n%s", strings.Join(args, " "), err, errs.String())
		}
		return out.String()
	}
	at := time.Now().Add(-time.Minute).UnixNano()
	out := cli("leave", "--brokers", kafka, "--user", "42", "--at-ns", fmt.Sprint(at), "--request-id", "cli-1", "--wait", "--timeout", "30s")
	published, receipt, _ := strings.Cut(out, "receipt (membership.changelog):\n")
	if !strings.HasPrefix(published, "published leave of user 42 (request_id cli-1) to membership.commands partition 4 offset 0\n") {
		t.Errorf("leave printed:\n%s", out)
	}
	rec, err := topics.DecodeMemberRecord([]byte(receipt))
	if err != nil || rec.Status != "left" || *rec.LeftAtNs != uint64(at) || rec.Command.RequestID != "cli-1" {
		t.Errorf("leave --wait receipt: %+v, %v:\n%s", rec, err, out)
	}

	viaHTTP := cli("status", "--user", "42", "--api-addr", api, "--api-token-file", filepath.Join(dataDir, apiTokenFileName))
	viaKafka := cli("status", "--user", "42", "--brokers", kafka)
	// A pod names its data dir once, for every subcommand: status finds
	// the token the processor created there without --api-token-file.
	t.Setenv("COHORTGATE_DATA_DIR", dataDir)
	if got := cli("status", "--user", "42", "--api-addr", api); got != viaHTTP {
		t.Errorf("status with COHORTGATE_DATA_DIR and no --api-token-file:\n%s\nwant:\n%s", got, viaHTTP)
	}
	for name, got := range map[string]string{"http": viaHTTP, "changelog": viaKafka} {
		if !strings.Contains(got, `"status": "left"`) || !strings.Contains(got, fmt.Sprintf(`"left_at_ns": %d`, at)) {
			t.Errorf("status from the %s:\n%s", name, got)
		}
	}
	var h, k topics.MemberRecord
	if json.Unmarshal([]byte(viaHTTP), &h) != nil || json.Unmarshal([]byte(viaKafka), &k) != nil || *h.LeftAtNs != *k.LeftAtNs || *h.Command != *k.Command {
		t.Errorf("status from HTTP and from the changelog differ:\n%s\n%s", viaHTTP, viaKafka)
	}

	out = cli("rejoin", "--brokers", kafka, "--user", "42", "--wait")
	if !strings.Contains(out, "published rejoin of user 42") || !strings.Contains(out, `"status": "active"`) || !strings.Contains(out, `"rejoined_at_ns"`) {
		t.Errorf("rejoin --wait printed:\n%s", out)
	}
}

// TestCommandFlags: bad flags are refused before anything connects, one
// line per problem naming the flag.
func TestCommandFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"leave", "--user", "007", "--at-ns", "soon"}, []string{"--user", "--at-ns"}},
		{[]string{"rejoin", "--user", "1", "--timeout", "0s"}, []string{"--timeout"}},
		{[]string{"leave", "--user", "1", "--kafka-sasl-mechanism", "PLAIN"}, []string{"--kafka-sasl-user"}},
		{[]string{"status", "--user", "x"}, []string{"--user"}},
	} {
		err := dispatch(context.Background(), tc.args, io.Discard, io.Discard)
		if err == nil {
			t.Errorf("%v accepted", tc.args)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v: error does not name %s:\n%v", tc.args, w, err)
			}
		}
	}
}

// grepLines is the lines of b that contain s.
func grepLines(b []byte, s string) string {
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
