package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/cohortgate/cohortgate/internal/cmdline"
	"github.com/cohortgate/cohortgate/topics"
)

// TestBulkLeave: `processor leave --from FILE --job J` against a running
// processor: every user's receipt is counted in the summary; the same job
// run again changes nothing (each changelog record says duplicate); a bad
// line stops the job before anything is published, or with
// --skip-bad-lines is reported and skipped; a refusal is counted by its
// reason and makes the exit status 1.
func TestBulkLeave(t *testing.T) {
	kafka, _, _, _ := tryProcessor(t)
	dir := t.TempDir()
	write := func(name, text string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	const n = 150
	var users strings.Builder
	users.WriteString("# users of ticket 4711\n\n")
	for i := range n {
		fmt.Fprintf(&users, "%d\n", 1000+i)
	}
	users.WriteString("  1000  # again, with spaces\n")
	file := write("users.txt", users.String())
	at := time.Now().Add(-time.Minute).UTC().Truncate(time.Millisecond)
	jobID := "ticket-4711@" + at.Format(time.RFC3339Nano)

	cli := func(args ...string) (stdout, stderr string, err error) {
		t.Helper()
		var out, errs bytes.Buffer
		err = dispatch(context.Background(), append(args, "--brokers", kafka, "--timeout", "30s"), &out, &errs)
		return out.String(), errs.String(), err
	}
	row := func(summary, name string) string {
		m := regexp.MustCompile(`(?m)^  ` + name + ` +(\d+)  `).FindStringSubmatch(summary)
		if m == nil {
			return "absent"
		}
		return m[1]
	}
	check := func(what, summary string, want map[string]int) {
		t.Helper()
		for name, v := range want {
			if got := row(summary, name); got != fmt.Sprint(v) {
				t.Errorf("%s: %s is %s, want %d:\n%s", what, name, got, v, summary)
			}
		}
	}

	out, progress, err := cli("leave", "--from", file, "--job", jobID)
	if err != nil {
		t.Fatalf("first run: %v\n%s%s", err, out, progress)
	}
	check("first run", out, map[string]int{"applied": n, "unchanged": 0, "duplicate": 0, "refused": 0, "not published": 0, "no receipt": 0})
	if want := fmt.Sprintf("%d users from %s (%d lines: 2 blank or comments, 0 bad, 1 repeated ids)", n, file, n+3); !strings.Contains(out, want) ||
		!strings.Contains(out, "every user done") {
		t.Errorf("first run's summary does not say %q and every user done:\n%s", want, out)
	}
	// Not a terminal: plain lines, the last one complete.
	if !strings.Contains(progress, fmt.Sprintf("leave: %d/%d done (100%%), ", n, n)) || !strings.Contains(progress, "receipts pending 0") ||
		strings.Contains(progress, "\r") {
		t.Errorf("first run's progress on stderr:\n%q", progress)
	}

	out, progress, err = cli("leave", "--from", file, "--job", jobID)
	if err != nil {
		t.Fatalf("second run: %v\n%s%s", err, out, progress)
	}
	check("the same job again", out, map[string]int{"applied": 0, "unchanged": 0, "duplicate": n, "refused": 0})
	// The changelog says so: the user's latest record follows the
	// second run's command, a duplicate with the job's identity.
	status, _, err := cli("status", "--user", "1042")
	if err != nil {
		t.Fatal(err)
	}
	rec, err := topics.DecodeMemberRecord([]byte(status))
	if err != nil || rec.Command == nil || !rec.Command.Duplicate || rec.Command.Changed || rec.Command.RequestID != jobID ||
		rec.LeftAtNs == nil || *rec.LeftAtNs != uint64(at.UnixNano()) {
		t.Errorf("user 1042's record after the job ran twice: %v\n%s", err, status)
	}

	// A bad line stops the job before anything is published.
	bad := write("bad.txt", "2001\n2002\n007\n2003\n")
	out, stderr, err := cli("leave", "--from", bad, "--job", jobID)
	if err == nil || !strings.Contains(err.Error(), "1 bad lines") || !strings.Contains(err.Error(), "nothing was published") ||
		!strings.Contains(stderr, bad+`:3: "007": the leading zero is the problem`) || out != "" {
		t.Errorf("a bad line: %v\nstdout:\n%s\nstderr:\n%s", err, out, stderr)
	}
	if status, _, err := cli("status", "--user", "2001"); err != nil || !strings.Contains(status, `"status": "active"`) {
		t.Errorf("user 2001 of the stopped job: %v\n%s", err, status)
	}
	// With --skip-bad-lines the others are published; the exit status
	// still says a line was bad.
	out, stderr, err = cli("leave", "--from", bad, "--job", jobID, "--skip-bad-lines")
	var failed *cmdline.Failed
	if !errors.As(err, &failed) || failed.Code != 1 || !strings.Contains(stderr, bad+":3:") {
		t.Errorf("--skip-bad-lines: %v, want exit status 1 and line 3 reported:\n%s", err, stderr)
	}
	check("--skip-bad-lines", out, map[string]int{"applied": 3})

	// A rejoin job whose boundary lies before the leaves is refused,
	// every one, by reason.
	before := "undo-4711@" + at.Add(-time.Minute).Format(time.RFC3339Nano)
	out, _, err = cli("rejoin", "--from", file, "--job", before)
	if !errors.As(err, &failed) || failed.Code != 1 {
		t.Errorf("a refused rejoin job: %v, want exit status 1", err)
	}
	check("refused rejoins", out, map[string]int{"applied": 0, "refused": n})
	if !regexp.MustCompile(`(?m)^    rejoin_before_leave +150$`).MatchString(out) ||
		!strings.Contains(out, fmt.Sprintf("%d of %d users not done", n, n)) {
		t.Errorf("refused rejoins' summary:\n%s", out)
	}
}

// TestBulkFlags: a job's flags are checked before anything connects.
func TestBulkFlags(t *testing.T) {
	file := filepath.Join(t.TempDir(), "users.txt")
	if err := os.WriteFile(file, []byte("1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"leave", "--from", file, "--job", "no-time"}, "want LABEL@TIME"},
		{[]string{"leave", "--from", file, "--job", "x@yesterday"}, "no RFC 3339 time"},
		{[]string{"leave", "--from", file, "--job", "x@2999-01-01T00:00:00Z"}, "ahead of this machine's clock"},
		{[]string{"leave", "--from", file, "--user", "1"}, "give no --user"},
		{[]string{"leave", "--from", file, "--in-flight", "0"}, "--in-flight 0"},
		{[]string{"leave", "--user", "1", "--job", "x@2026-01-01T00:00:00Z"}, "go with --from"},
		{[]string{"leave", "--from", filepath.Join(t.TempDir(), "absent")}, "no such file"},
	} {
		err := dispatch(context.Background(), append(tc.args, "--brokers", "127.0.0.1:1"), &bytes.Buffer{}, &bytes.Buffer{})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%v: %v, want an error saying %q", tc.args, err, tc.want)
		}
	}
}

// TestReadUsers: what a --from file may hold, line by line.
func TestReadUsers(t *testing.T) {
	in, err := readUsers(strings.NewReader("# header\n\n42\n  7 # seven\r\n42\n007\n-1\n18446744073709551616\n3"))
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(in.users) != "[3 7 42]" || in.lines != 9 || in.skipped != 2 || in.repeated != 1 || len(in.bad) != 3 {
		t.Errorf("read %+v", in)
	}
	for i, want := range []struct {
		n    int
		text string
	}{{6, "007"}, {7, "-1"}, {8, "18446744073709551616"}} {
		if i < len(in.bad) && (in.bad[i].n != want.n || in.bad[i].text != want.text || in.bad[i].reason == "") {
			t.Errorf("bad line %d: %+v, want line %d %q with a reason", i, in.bad[i], want.n, want.text)
		}
	}
	if _, err := readUsers(strings.NewReader("1\n" + strings.Repeat("9", maxLineBytes+1))); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("a line over %d bytes: %v", maxLineBytes, err)
	}
}

// TestBulkNoReceipts: with no processor to answer, a job gives up once
// nothing moved for --timeout, and says how many receipts are missing
// and that the same job may run again.
func TestBulkNoReceipts(t *testing.T) {
	set := topics.Defaults()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(6, string(set.Commands), string(set.Changelog), string(set.DLQ)))
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Close()
	file := filepath.Join(t.TempDir(), "users.txt")
	if err := os.WriteFile(file, []byte("1\n2\n3\n4\n5\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var out, stderr bytes.Buffer
	jobID := "nobody-listens@" + time.Now().UTC().Format(time.RFC3339)
	err = dispatch(context.Background(), []string{"leave", "--brokers", strings.Join(cluster.ListenAddrs(), ","), "--from", file,
		"--job", jobID, "--timeout", "1s"}, &out, &stderr)
	var failed *cmdline.Failed
	if !errors.As(err, &failed) || failed.Code != 1 {
		t.Errorf("a job nobody answers: %v, want exit status 1\n%s", err, stderr.String())
	}
	if !regexp.MustCompile(`(?m)^  no receipt +5  `).MatchString(out.String()) ||
		!strings.Contains(out.String(), "5 of 5 users not done: run the same command again, with --job "+jobID) ||
		!strings.Contains(out.String(), "no progress for --timeout 1s") {
		t.Errorf("summary of a job nobody answers:\n%s", out.String())
	}
	if !strings.Contains(stderr.String(), "published 5, receipts pending 0") {
		t.Errorf("last progress line of a job nobody answers:\n%s", stderr.String())
	}
}

// TestProgressTerminal: on a terminal the line is rewritten in place,
// and the last one ends it.
func TestProgressTerminal(t *testing.T) {
	var buf bytes.Buffer
	tl := newTally(10, time.Now())
	tl.published.Store(4)
	tl.answered.Store(3)
	p := &progress{w: &buf, tty: true, every: 200 * time.Millisecond, op: topics.Leave, t: tl, start: time.Now()}
	p.draw(false)
	if got := buf.String(); !strings.HasPrefix(got, "\rleave: 3/10 done (30%), ") || !strings.Contains(got, "published 4, receipts pending 1") ||
		!strings.HasSuffix(got, "\x1b[K") {
		t.Errorf("a line on a terminal: %q", got)
	}
	buf.Reset()
	p.draw(true)
	if got := buf.String(); !strings.HasPrefix(got, "\r") || !strings.HasSuffix(got, "\x1b[K\n") {
		t.Errorf("the last line on a terminal: %q", got)
	}
}
