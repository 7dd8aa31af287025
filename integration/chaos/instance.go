package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// instance is one processor of a scenario: a child process that is
// started, killed, stopped and restarted over one data dir, with its
// output appended to one log file.
type instance struct {
	name    string
	bin     string
	dir     string   // --data-dir, kept across restarts
	logPath string   // stdout and stderr of every start
	args    []string // flags of every start, without --data-dir, --http-addr and --api-addr
	onExit  func(in *instance, unexpected bool, err error)
	ports   *portBook // the run's; nil: probed alone

	// mu guards the fields below, which change with each start.
	mu struct {
		sync.Mutex
		cmd      *exec.Cmd
		http     string
		api      string        // --api-addr: /v1/, with the token the processor keeps in dir
		exited   chan struct{} // closed when the current process has exited
		expected bool          // we asked the current process to end
		stopped  bool          // SIGSTOPped
		// expectNext: the next start's process is expected to end on
		// its own (a start the processor must refuse).
		expectNext bool
		extra      []string // flags added to args from the next start on
		starts     int
	}
}

// start runs the processor once more over the instance's data dir. It
// returns once the process has started; see ready.
func (in *instance) start() error {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.mu.cmd != nil && !isClosed(in.mu.exited) {
		return fmt.Errorf("%s: already running", in.name)
	}
	addr, err := in.ports.free()
	if err != nil {
		return err
	}
	api, err := in.ports.free()
	if err != nil {
		return err
	}
	args := append([]string{"run", "--data-dir", in.dir, "--http-addr", addr, "--api-addr", api}, in.args...)
	args = append(args, in.mu.extra...)
	logf, err := os.OpenFile(in.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	in.mu.starts++
	fmt.Fprintf(logf, "=== chaos: start %d of %s at %s: %s %s\n", in.mu.starts, in.name,
		time.Now().Format(time.RFC3339Nano), in.bin, strings.Join(args, " "))
	cmd := exec.Command(in.bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// Its own process group: a Ctrl-C at the terminal reaches the
	// harness, which then kills its children, rather than every
	// processor at once.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("%s: unable to start %s: %w", in.name, in.bin, err)
	}
	exited := make(chan struct{})
	in.mu.cmd, in.mu.http, in.mu.api, in.mu.exited = cmd, addr, api, exited
	in.mu.expected, in.mu.stopped, in.mu.expectNext = in.mu.expectNext, false, false
	go func() {
		err := cmd.Wait()
		logf.Close()
		in.mu.Lock()
		unexpected := !in.mu.expected
		in.mu.Unlock()
		close(exited)
		if in.onExit != nil {
			in.onExit(in, unexpected, err)
		}
	}()
	return nil
}

// expectNextExit makes the next start's process one that is expected to
// exit on its own: its exit is no finding.
func (in *instance) expectNextExit() {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.mu.expectNext = true
}

// exitedCh returns a channel closed when the current process has exited.
func (in *instance) exitedCh() chan struct{} {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.mu.exited
}

// addFlags adds flags to every later start.
func (in *instance) addFlags(flags ...string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	in.mu.extra = append(in.mu.extra, flags...)
}

func isClosed(c chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// running reports whether the current process has not exited (it may be
// stopped).
func (in *instance) running() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.mu.cmd != nil && !isClosed(in.mu.exited)
}

// diedOnItsOwn reports whether the instance was started and its last
// process exited without being asked to.
func (in *instance) diedOnItsOwn() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.mu.cmd != nil && isClosed(in.mu.exited) && !in.mu.expected
}

// answering reports whether the instance runs and is not stopped, so its
// HTTP server answers.
func (in *instance) answering() bool {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.mu.cmd != nil && !isClosed(in.mu.exited) && !in.mu.stopped
}

// signal sends sig to the current process. expectExit marks the exit that
// follows as asked for.
func (in *instance) signal(sig syscall.Signal, expectExit bool) (chan struct{}, error) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.mu.cmd == nil || isClosed(in.mu.exited) {
		return nil, fmt.Errorf("%s: not running", in.name)
	}
	if expectExit {
		in.mu.expected = true
	}
	switch sig {
	case syscall.SIGSTOP:
		in.mu.stopped = true
	case syscall.SIGCONT:
		in.mu.stopped = false
	}
	if err := in.mu.cmd.Process.Signal(sig); err != nil {
		return nil, fmt.Errorf("%s: %v: %w", in.name, sig, err)
	}
	return in.mu.exited, nil
}

// kill sends SIGKILL and waits (bounded) for the process to be gone.
func (in *instance) kill() error {
	exited, err := in.signal(syscall.SIGKILL, true)
	if err != nil {
		return err
	}
	select {
	case <-exited:
		return nil
	case <-time.After(10 * time.Second):
		return fmt.Errorf("%s: still running 10s after SIGKILL", in.name)
	}
}

// term sends SIGTERM and waits up to d for a clean exit. A stopped process
// is continued first. On timeout it kills the process and says so.
func (in *instance) term(d time.Duration) error {
	in.mu.Lock()
	stopped := in.mu.stopped
	in.mu.Unlock()
	if stopped {
		if _, err := in.signal(syscall.SIGCONT, false); err != nil {
			return err
		}
	}
	exited, err := in.signal(syscall.SIGTERM, true)
	if err != nil {
		return err
	}
	select {
	case <-exited:
		if code := in.exitCode(); code != 0 {
			return fmt.Errorf("%s: exited with status %d after SIGTERM", in.name, code)
		}
		return nil
	case <-time.After(d):
		_ = in.kill()
		return fmt.Errorf("%s: did not exit within %v of SIGTERM; killed", in.name, d)
	}
}

// exitCode is the exit status of the last process, -1 if it was killed
// by a signal or is running.
func (in *instance) exitCode() int {
	in.mu.Lock()
	defer in.mu.Unlock()
	if in.mu.cmd == nil || in.mu.cmd.ProcessState == nil {
		return -1
	}
	return in.mu.cmd.ProcessState.ExitCode()
}

// shutdown ends the current process by any means: continue, then SIGKILL.
func (in *instance) shutdown() {
	if !in.running() {
		return
	}
	_, _ = in.signal(syscall.SIGCONT, false)
	_ = in.kill()
}

func (in *instance) httpAddr() string {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.mu.http
}

// get fetches path from the instance's HTTP server or, for the
// membership API (/v1/), from its API listener with its bearer token.
func (in *instance) get(ctx context.Context, path string) (int, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	addr, token := in.httpAddr(), ""
	if strings.HasPrefix(path, "/v1/") {
		in.mu.Lock()
		addr = in.mu.api
		in.mu.Unlock()
		// Created by the processor in its data dir at its first start
		// (again after a wipe), read at each call.
		b, err := os.ReadFile(filepath.Join(in.dir, "api-token"))
		if err != nil {
			return 0, nil, fmt.Errorf("the API token: %w", err)
		}
		token = strings.TrimSpace(string(b))
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return 0, nil, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	return resp.StatusCode, body, err
}

// ready reports nil once /readyz answers 200.
func (in *instance) ready(ctx context.Context) error {
	code, body, err := in.get(ctx, "/readyz")
	if err != nil {
		return fmt.Errorf("%s: /readyz: %w", in.name, err)
	}
	if code != http.StatusOK {
		return fmt.Errorf("%s: /readyz %d: %s", in.name, code, strings.TrimSpace(string(body)))
	}
	return nil
}

// partitions returns the partitions the instance owns and whether each
// forwards (true) or is restoring (false).
func (in *instance) partitions(ctx context.Context) (map[int32]bool, error) {
	code, body, err := in.get(ctx, "/v1/partitions")
	if err != nil {
		return nil, fmt.Errorf("%s: /v1/partitions: %w", in.name, err)
	}
	if code != http.StatusOK {
		return nil, fmt.Errorf("%s: /v1/partitions %d: %s", in.name, code, strings.TrimSpace(string(body)))
	}
	var raw map[string]struct {
		State string `json:"state"`
	}
	if err := json.Unmarshal(body, &raw); err != nil {
		return nil, fmt.Errorf("%s: /v1/partitions: %w", in.name, err)
	}
	out := make(map[int32]bool, len(raw))
	for k, v := range raw {
		p, err := strconv.ParseInt(k, 10, 32)
		if err != nil {
			return nil, fmt.Errorf("%s: /v1/partitions: partition %q: %w", in.name, k, err)
		}
		out[int32(p)] = v.State == "forwarding"
	}
	return out, nil
}

// wipe deletes the instance's membership store (not its instance id, so
// its transactional ID stays). The instance must not be running.
func (in *instance) wipe() error {
	if in.running() {
		return fmt.Errorf("%s: wipe while running", in.name)
	}
	if err := os.RemoveAll(filepath.Join(in.dir, "membership")); err != nil {
		return fmt.Errorf("%s: wipe: %w", in.name, err)
	}
	return nil
}

// empty deletes the instance's whole data dir (store, instance id, API
// token, gate snapshot), as an operator does who starts it with an empty
// data directory. The instance must not be running.
func (in *instance) empty() error {
	if in.running() {
		return fmt.Errorf("%s: emptying its data dir while running", in.name)
	}
	if err := os.RemoveAll(in.dir); err != nil {
		return fmt.Errorf("%s: emptying its data dir: %w", in.name, err)
	}
	return nil
}

// dumpGoroutines asks a running process for its goroutines (SIGQUIT: the
// Go runtime writes them to stderr, the log, and exits), for the post
// mortem of a scenario that got stuck.
func (in *instance) dumpGoroutines() {
	if !in.running() {
		return
	}
	_, _ = in.signal(syscall.SIGCONT, false)
	exited, err := in.signal(syscall.SIGQUIT, true)
	if err != nil {
		return
	}
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
	}
}

// warnings counts the processor's warning and error lines by message.
func (in *instance) warnings(counts map[string]int) {
	f, err := os.Open(in.logPath)
	if err != nil {
		return
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		level := ""
		switch {
		case strings.Contains(line, "level=WARN"):
			level = "WARN"
		case strings.Contains(line, "level=ERROR"):
			level = "ERROR"
		case strings.HasPrefix(line, "panic:"), strings.HasPrefix(line, "fatal error:"), strings.HasPrefix(line, "processor: "):
			counts[line]++
			continue
		default:
			continue
		}
		msg := line
		if i := strings.Index(line, `msg="`); i >= 0 {
			msg = line[i+5:]
			if j := strings.IndexByte(msg, '"'); j >= 0 {
				msg = msg[:j]
			}
		}
		counts[level+" "+msg]++
	}
}

// goroutineDump starts the Go runtime's answer to SIGQUIT.
const goroutineDump = "SIGQUIT: quit"

// stacks summarises the last goroutine dump in the log: the functions of
// the goroutines that run cohortgate's pipeline or franz-go's group
// management, which is where a stuck processor waits.
func (in *instance) stacks() string {
	b, err := os.ReadFile(in.logPath)
	if err != nil {
		return ""
	}
	i := strings.LastIndex(string(b), goroutineDump)
	if i < 0 {
		return ""
	}
	var out []string
	for _, g := range strings.Split(string(b[i:]), "\n\n") {
		if !strings.Contains(g, "cohortgate/pkg/fanout.(*loop)") && !strings.Contains(g, "kgo.(*groupConsumer).manage") {
			continue
		}
		lines := strings.Split(g, "\n")
		out = append(out, lines[0])
		for _, l := range lines[1:] {
			if strings.HasPrefix(l, "\t") || strings.HasPrefix(l, "runtime.") || strings.HasPrefix(l, "created by") {
				continue
			}
			if j := strings.LastIndexByte(l, '('); j > 0 {
				l = l[:j]
			}
			out = append(out, "  "+l)
		}
	}
	return strings.Join(out, "\n")
}

// tail returns the last n lines of the instance's log, leaving out
// goroutine dumps.
func (in *instance) tail(n int) string {
	f, err := os.Open(in.logPath)
	if err != nil {
		return err.Error()
	}
	defer f.Close()
	var lines []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	inDump := false
	for sc.Scan() {
		switch line := sc.Text(); {
		case strings.HasPrefix(line, goroutineDump):
			inDump = true
			lines = append(lines, "(goroutine dump; see the log)")
			continue
		case strings.HasPrefix(line, "=== chaos: start"):
			inDump = false
		case inDump:
			continue
		}
		lines = append(lines, sc.Text())
		if len(lines) > 4*n {
			lines = append(lines[:0], lines[len(lines)-n:]...)
		}
	}
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// grepLog returns the log lines (at most max) that contain any of words.
func (in *instance) grepLog(max int, words ...string) []string {
	f, err := os.Open(in.logPath)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() && len(out) < max {
		line := sc.Text()
		for _, w := range words {
			if strings.Contains(line, w) {
				out = append(out, line)
				break
			}
		}
	}
	return out
}

func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", fmt.Errorf("unable to find a free port: %w", err)
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// portBook hands out free loopback addresses, each at most once in a run.
// A probed port is free again once its probe closes, and the kernel may
// give it to the next probe: two instances started together were both
// given one --api-addr, and the second exited, unable to listen.
type portBook struct {
	probe func() (string, error) // freeAddr unless a test says otherwise
	mu    sync.Mutex
	given map[string]bool
}

// portTries bounds how many probes free makes for one address.
const portTries = 100

// free returns a free address the book has not given before; a nil book
// returns whatever one probe finds.
func (b *portBook) free() (string, error) {
	if b == nil {
		return freeAddr()
	}
	probe := b.probe
	if probe == nil {
		probe = freeAddr
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for range portTries {
		addr, err := probe()
		if err != nil {
			return "", err
		}
		if !b.given[addr] {
			if b.given == nil {
				b.given = make(map[string]bool)
			}
			b.given[addr] = true
			return addr, nil
		}
	}
	return "", fmt.Errorf("unable to find a free port: %d probes found only ports given before", portTries)
}
