package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// child is a process the harness started: a processor, the passthrough,
// the Kafka Streams app or the load generator. Its stdout and stderr go to
// one log file; onLine, if set, also sees every line.
type child struct {
	name string
	cmd  *exec.Cmd
	log  string // path of the log file

	done chan struct{} // closed once the process has exited
	err  error         // the result of Wait; valid once done is closed
	// rusage is the process's resource use, valid once done is closed.
	rusage *syscall.Rusage
}

// procs are the processes a harness started and that are still running;
// stopAll ends them however the harness ends. Start and stopAll may be
// called from any goroutine.
type procs struct {
	mu   sync.Mutex
	live map[*child]bool // guarded by mu
}

// start starts bin with args, logging to logPath. The child gets its own
// process group (a Ctrl-C reaches the harness, which stops its children in
// order) and is killed by the kernel if the harness dies first.
func (ps *procs) start(name, logPath string, onLine func(string), bin string, args ...string) (*child, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(f, "=== bench: %s %s: %s %s\n", time.Now().Format(time.RFC3339Nano), name, bin, strings.Join(args, " "))
	var out io.Writer = f
	if onLine != nil {
		out = &lineWriter{w: f, fn: onLine}
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: unable to start %s: %w", name, bin, err)
	}
	c := &child{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	ps.mu.Lock()
	if ps.live == nil {
		ps.live = make(map[*child]bool)
	}
	ps.live[c] = true
	ps.mu.Unlock()
	go func() {
		c.err = cmd.Wait()
		f.Close()
		if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok {
			c.rusage = ru
		}
		ps.mu.Lock()
		delete(ps.live, c)
		ps.mu.Unlock()
		close(c.done)
	}()
	return c, nil
}

// stopAll stops every child still running, each with grace, and waits for
// them.
func (ps *procs) stopAll(grace time.Duration) {
	ps.mu.Lock()
	live := make([]*child, 0, len(ps.live))
	for c := range ps.live {
		live = append(live, c)
	}
	ps.mu.Unlock()
	for _, c := range live {
		c.stop(grace)
	}
}

func (c *child) pid() int { return c.cmd.Process.Pid }

// exited reports whether the process has ended.
func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// wait waits for the process to end on its own, at most until ctx ends.
func (c *child) wait(ctx context.Context) error {
	select {
	case <-c.done:
		return c.err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// stop asks the process group to end (SIGTERM), waits up to grace, then
// kills it. It returns once the process has exited.
func (c *child) stop(grace time.Duration) {
	if c.exited() {
		return
	}
	_ = syscall.Kill(-c.pid(), syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-c.done:
		return
	case <-t.C:
	}
	_ = syscall.Kill(-c.pid(), syscall.SIGKILL)
	<-c.done
}

// failure describes how the process ended, with the end of its log.
func (c *child) failure() error {
	tail, _ := tailFile(c.log, 20)
	return fmt.Errorf("%s exited: %v; last lines of %s:\n%s", c.name, c.err, c.log, tail)
}

// lineWriter writes to w and calls fn with every complete line.
type lineWriter struct {
	w    io.Writer
	fn   func(string)
	mu   sync.Mutex // exec may copy stdout and stderr from two goroutines
	part []byte
}

func (l *lineWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.part = append(l.part, p...)
	for {
		i := bytes.IndexByte(l.part, '\n')
		if i < 0 {
			break
		}
		l.fn(string(l.part[:i]))
		l.part = l.part[i+1:]
	}
	if len(l.part) > 64<<10 { // a runaway line: keep memory bounded
		l.part = l.part[:0]
	}
	return l.w.Write(p)
}

// tailFile returns the last n lines of the file at path.
func tailFile(path string, n int) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n"), nil
}
