package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

// TestMessages: each operational mistake is told with what to do.
func TestMessages(t *testing.T) {
	t.Run("leading zero", func(t *testing.T) {
		for _, cmd := range []string{"leave", "status"} {
			err := dispatch(context.Background(), []string{cmd, "--user", "007"}, io.Discard, io.Discard)
			if err == nil || !strings.Contains(err.Error(), `--user "007": the leading zero is the problem`) || !strings.Contains(err.Error(), "--user=7") {
				t.Errorf("%s --user 007: %v", cmd, err)
			}
		}
	})

	t.Run("data dir in use", func(t *testing.T) {
		// Another process holds the store's lock, as a running
		// processor's Pebble does (an fcntl lock: one per process).
		dir := t.TempDir()
		if err := os.MkdirAll(filepath.Join(dir, "membership"), 0o755); err != nil {
			t.Fatal(err)
		}
		holder := exec.Command(os.Args[0], "-test.run=^TestHoldLock$")
		holder.Env = append(os.Environ(), "HOLD_LOCK="+filepath.Join(dir, "membership", "LOCK"))
		stdin, _ := holder.StdinPipe()
		stdout, _ := holder.StdoutPipe()
		if err := holder.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { stdin.Close(); _ = holder.Wait() }()
		if line, err := bufio.NewReader(stdout).ReadString('\n'); err != nil || line != "locked\n" {
			t.Fatalf("the lock holder said %q, %v", line, err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		err := dispatch(ctx, []string{"try", "--embedded-addr", freePort(t), "--http-addr", freePort(t), "--api-addr=",
			"--data-dir", dir, "--log-level", "error"}, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "--data-dir "+dir+" is in use by another processor") ||
			!strings.Contains(err.Error(), "a --data-dir of its own") {
			t.Errorf("a locked data dir: %v", err)
		}
	})

	t.Run("missing topics", func(t *testing.T) {
		c, err := kfake.NewCluster(kfake.NumBrokers(1))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		err = dispatch(ctx, []string{"run", "--brokers", strings.Join(c.ListenAddrs(), ","), "--create-topics=false",
			"--http-addr", freePort(t), "--data-dir", t.TempDir(), "--log-level", "error"}, io.Discard, io.Discard)
		if err == nil || !strings.Contains(err.Error(), "topics do not exist") || !strings.Contains(err.Error(), "--create-topics=true") {
			t.Errorf("missing topics: %v", err)
		}
	})
}

// TestHoldLock is the other process of "data dir in use": it takes the
// fcntl lock on $HOLD_LOCK, says "locked", and holds it until its stdin
// closes.
func TestHoldLock(t *testing.T) {
	path := os.Getenv("HOLD_LOCK")
	if path == "" {
		t.Skip("the helper process of TestMessages")
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.FcntlFlock(f.Fd(), syscall.F_SETLK, &syscall.Flock_t{Type: syscall.F_WRLCK}); err != nil {
		t.Fatal(err)
	}
	fmt.Println("locked")
	_, _ = io.Copy(io.Discard, os.Stdin)
}
