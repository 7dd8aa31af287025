package integration

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/cohortgate/cohortgate/integration/workload"
)

var build struct {
	once sync.Once
	path string
	err  error
}

// processorBinary builds cmd/processor once per test run.
func processorBinary(t testing.TB) string {
	t.Helper()
	build.once.Do(func() {
		dir, err := os.MkdirTemp("", "cohortgate-bin-")
		if err != nil {
			build.err = err
			return
		}
		build.path = filepath.Join(dir, "processor")
		out, err := exec.Command("go", "build", "-race", "-o", build.path, "../cmd/processor").CombinedOutput()
		if err != nil {
			build.err = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if build.err != nil {
		t.Fatal(build.err)
	}
	return build.path
}

// binary is `processor run` in a child process.
type binary struct {
	cmd    *exec.Cmd
	http   string
	api    string // --api-addr; its token is in token's file
	token  string // --api-token-file
	stderr *lockedBuffer
	exited chan error
}

// runBinary starts `processor run` for this env; extra flags are appended.
func (e *env) runBinary(dataDir string, extra ...string) *binary {
	e.t.Helper()
	b := &binary{http: freeAddr(e.t), api: freeAddr(e.t), token: filepath.Join(e.t.TempDir(), "api-token"),
		stderr: &lockedBuffer{}, exited: make(chan error, 1)}
	if err := os.WriteFile(b.token, []byte("integration-token\n"), 0o600); err != nil {
		e.t.Fatal(err)
	}
	args := append([]string{"run",
		"--brokers", strings.Join(broker.addrs, ","),
		"--group", e.group,
		"--data-dir", dataDir,
		"--http-addr", b.http,
		"--api-addr", b.api,
		"--api-token-file", b.token,
		"--replication-factor", "1",
		"--grace", "100ms",
		"--commit-interval", "50ms",
	}, append(workload.TopicFlags(e.set), extra...)...)
	b.cmd = exec.Command(processorBinary(e.t), args...)
	b.start(e.t)
	return b
}

// start starts b.cmd with its output collected, and kills it when the
// test ends, showing the output if the test failed.
func (b *binary) start(t testing.TB) {
	t.Helper()
	b.cmd.Stderr, b.cmd.Stdout = b.stderr, b.stderr
	if err := b.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { b.exited <- b.cmd.Wait() }()
	t.Cleanup(func() {
		if b.cmd.ProcessState == nil {
			_ = b.cmd.Process.Kill()
			<-b.exited
		}
		if t.Failed() {
			t.Logf("processor output:\n%s", b.stderr.String())
		}
	})
}

// stop sends SIGTERM and waits for a clean exit.
func (b *binary) stop(t *testing.T) {
	t.Helper()
	if err := b.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-b.exited:
		if err != nil {
			t.Fatalf("processor exited with %v after SIGTERM; output:\n%s", err, b.stderr.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatalf("processor did not exit within 60s of SIGTERM")
	}
}

// get fetches path from the processor's HTTP server.
func (b *binary) get(path string) (int, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	addr := b.http
	if strings.HasPrefix(path, "/v1/") { // the membership API: its own listener, with the token
		addr = b.api
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if addr == b.api {
		req.Header.Set("Authorization", "Bearer integration-token")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body), err
}

func (b *binary) waitReady(t *testing.T) {
	t.Helper()
	eventually(t, 90*time.Second, func() error {
		select {
		case err := <-b.exited:
			b.exited <- err
			t.Fatalf("processor exited: %v\n%s", err, b.stderr.String())
		default:
		}
		code, body, err := b.get("/readyz")
		if err != nil {
			return err
		}
		if code != http.StatusOK {
			return fmt.Errorf("/readyz %d: %s", code, strings.TrimSpace(body))
		}
		return nil
	})
}

// metrics scrapes /metrics.
func (b *binary) metrics(t *testing.T) map[string]*dto {
	t.Helper()
	code, body, err := b.get("/metrics")
	if err != nil || code != http.StatusOK {
		t.Fatalf("/metrics: %d %v", code, err)
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	out := make(map[string]*dto)
	for name, f := range families {
		d := &dto{values: make(map[string]float64)}
		for _, m := range f.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			v := m.GetCounter().GetValue() + m.GetGauge().GetValue() + m.GetUntyped().GetValue()
			if h := m.GetHistogram(); h != nil {
				v = float64(h.GetSampleCount())
			}
			d.values[strings.Join(labels, ",")] = v
		}
		out[name] = d
	}
	return out
}

// dto is one metric family: label set ("k=v,k=v", "" for none) → value.
type dto struct{ values map[string]float64 }

func (d *dto) get(labels string) float64 {
	if d == nil {
		return -1
	}
	return d.values[labels]
}

// cli runs a processor subcommand to completion and returns its output.
func (e *env) cli(args ...string) string {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, processorBinary(e.t), args...).CombinedOutput()
	if err != nil {
		e.t.Fatalf("processor %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestBinaryEndToEnd drives the binary as an operator would: the run
// command, the leave/rejoin/status commands, and the HTTP endpoints.
func TestBinaryEndToEnd(t *testing.T) {
	e := newEnv(t, 3)
	b := e.runBinary(t.TempDir())
	b.waitReady(t)
	if code, body, _ := b.get("/healthz"); code != http.StatusOK {
		t.Fatalf("/healthz %d %s", code, body)
	}
	brokers := strings.Join(broker.addrs, ",")
	cmdFlags := []string{"--brokers", brokers, "--commands-topic", string(e.set.Commands), "--changelog-topic", string(e.set.Changelog)}

	t0 := base()
	want := e.produceSignals(t0, []sig{{1, time.Second, true}, {2, time.Second, true}})
	out := e.cli(append([]string{"leave", "--user", "1", "--at-ns", fmt.Sprint(t0.Add(5 * time.Second).UnixNano()), "--wait"}, cmdFlags...)...)
	if !strings.Contains(out, "published leave of user 1") || !strings.Contains(out, `"receipt"`) || !strings.Contains(out, `"status": "left"`) {
		t.Fatalf("leave --wait printed:\n%s", out)
	}
	want = append(want, e.produceSignals(t0, []sig{{1, 6 * time.Second, false}, {2, 6 * time.Second, true}})...)
	slices.Sort(want)
	e.waitDecided()
	if got := e.forwardedValues(); !slices.Equal(got, want) {
		t.Fatalf("forwarded %v, want %v", got, want)
	}

	status := e.cli("status", "--user", "1", "--api-addr", b.api, "--api-token-file", b.token)
	if !strings.Contains(status, `"status": "left"`) || !strings.Contains(status, fmt.Sprintf(`"left_at_ns": %d`, t0.Add(5*time.Second).UnixNano())) {
		t.Fatalf("status printed:\n%s", status)
	}
	if code, body, _ := b.get("/v1/members/01"); code != http.StatusBadRequest {
		t.Fatalf("/v1/members/01: %d %s, want 400", code, body)
	}

	e.cli(append([]string{"rejoin", "--user", "1", "--at-ns", fmt.Sprint(t0.Add(7 * time.Second).UnixNano()), "--wait"}, cmdFlags...)...)
	status = e.cli("status", "--user", "1", "--api-addr", b.api, "--api-token-file", b.token)
	// Who does not hold the token is refused, and the HTTP port (metrics,
	// probes) does not serve the API at all.
	wrong := filepath.Join(t.TempDir(), "wrong-token")
	_ = os.WriteFile(wrong, []byte("guess\n"), 0o600)
	refused, err := exec.Command(processorBinary(t), "status", "--user", "1", "--api-addr", b.api, "--api-token-file", wrong).CombinedOutput()
	if err == nil || !strings.Contains(string(refused), "403 Forbidden") {
		t.Errorf("status with a wrong token: %v\n%s", err, refused)
	}
	req, _ := http.NewRequest(http.MethodGet, "http://"+b.http+"/v1/members/1", nil)
	req.Header.Set("Authorization", "Bearer integration-token")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != http.StatusNotFound {
		t.Errorf("the HTTP port answers /v1/members/1: %v %v, want 404", resp, err)
	} else {
		resp.Body.Close()
	}
	if !strings.Contains(status, `"status": "active"`) || !strings.Contains(status, `"rejoined_at_ns"`) {
		t.Fatalf("status after rejoin:\n%s", status)
	}

	e.waitDecided()
	m := b.metrics(t)
	route := "route=" + string(e.set.Signals) // the one route's series carry its input topic
	checks := []struct {
		name, labels string
		want         float64
	}{
		{"cohortgate_signals_in_total", route, 4},
		{"cohortgate_signals_forwarded_total", route, 3},
		{"cohortgate_signals_dropped_total", "reason=left," + route, 1},
		{"cohortgate_commands_applied_total", "op=leave,result=changed", 1},
		{"cohortgate_commands_applied_total", "op=rejoin,result=changed", 1},
		{"cohortgate_gate_members", "", 1},
		{"cohortgate_partitions_owned", "", 3},
		{"cohortgate_partitions_restoring", "", 0},
		{"cohortgate_ready", "", 1},
	}
	for _, c := range checks {
		if got := m[c.name].get(c.labels); got != c.want {
			t.Errorf("%s{%s} = %v, want %v", c.name, c.labels, got, c.want)
		}
	}
	kprom := false
	for name, f := range m {
		kprom = kprom || strings.HasPrefix(name, "cohortgate_kafka_")
		for labels := range f.values {
			if strings.Contains(labels, "user") {
				t.Errorf("metric %s has a user label: %s", name, labels)
			}
		}
	}
	if !kprom {
		t.Error("no cohortgate_kafka_* client metrics")
	}
	b.stop(t)
}

func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

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
