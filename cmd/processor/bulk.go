package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/cohortgate/cohortgate/internal/cmdline"
	"github.com/cohortgate/cohortgate/pkg/client"
	"github.com/cohortgate/cohortgate/topics"
)

// A bulk job is `processor leave|rejoin --from FILE`: one command per user
// of the file, published through pkg/client's ApplyAsync with its
// receipt, and a summary of what the processor made of each.
//
// A job is resumable because its identity is its commands': every command
// is client.Intent(job, boundary), where the job id LABEL@TIME names the
// boundary TIME. The processor applies an identity (op, user, boundary,
// request id) once, so the same job run again — after a crash, a timeout,
// an interrupt — applies what is left and restates the rest as
// duplicates.

// maxLineBytes bounds one line of a --from file: a user id is at most 20
// digits, and a longer line is no list of user ids.
const maxLineBytes = 1 << 20

// maxBadShown bounds the bad lines listed; the rest are counted.
const maxBadShown = 20

// bulkOptions are the flags of `processor leave|rejoin --from`.
type bulkOptions struct {
	from     string
	job      string
	skipBad  bool
	inFlight int
}

// register defines the bulk flags on f.
func (b *bulkOptions) register(f *flags) {
	f.StringVar(&b.from, "from", "", "publish the command for every user id in this file (- for stdin), one per line, with receipts; see --job")
	f.StringVar(&b.job, "job", "", "with --from: the job, LABEL@TIME (e.g. gdpr-4711@2026-12-06T20:00:00Z), TIME its commands' boundary (RFC 3339); "+
		"every command's request id and boundary come from it, so running the same job again changes nothing; empty: a new job LEAVE|REJOIN@now, printed")
	f.BoolVar(&b.skipBad, "skip-bad-lines", false, "with --from: publish the good lines of a file with bad ones (each still reported, and the exit status 1); by default a bad line stops the job before anything is published")
	f.IntVar(&b.inFlight, "in-flight", 50000, "with --from: at most this many commands published and not yet answered")
}

// job is a parsed --job: the request id of every command and their
// boundary.
type job struct {
	id string
	at time.Time
}

// parseJob reads --job LABEL@TIME, or makes a new job stamped now.
func parseJob(s string, op topics.Op, now time.Time) (job, error) {
	if s == "" {
		at := now.UTC().Truncate(time.Millisecond)
		return job{id: op.String() + "@" + at.Format(time.RFC3339Nano), at: at}, nil
	}
	example := fmt.Sprintf("--job %s@%s", strings.SplitN(s, "@", 2)[0], now.UTC().Truncate(time.Second).Format(time.RFC3339))
	label, stamp, ok := strings.Cut(s, "@")
	if i := strings.LastIndex(s, "@"); ok && i >= 0 {
		label, stamp = s[:i], s[i+1:] // a label may hold an @, the time cannot
	}
	switch {
	case !ok || label == "":
		return job{}, fmt.Errorf("--job %q: want LABEL@TIME, the time being the commands' boundary, e.g. %s; keep it to run the job again", s, example)
	case len(s) > topics.MaxRequestIDBytes || !utf8.ValidString(s):
		return job{}, fmt.Errorf("--job %q: at most %d bytes of UTF-8 (it is every command's request id)", s, topics.MaxRequestIDBytes)
	}
	at, err := time.Parse(time.RFC3339Nano, stamp)
	if err != nil {
		return job{}, fmt.Errorf("--job %q: the time after the @ is no RFC 3339 time, e.g. %s: %v", s, example, err)
	}
	if ahead := at.Sub(now); ahead > client.MaxAhead {
		return job{}, fmt.Errorf("--job %q: its time is %v ahead of this machine's clock; a job's time is when its decision took effect, not a later one", s, ahead.Round(time.Second))
	}
	if at.Before(time.Unix(1, 0)) {
		return job{}, fmt.Errorf("--job %q: its time is before the Unix epoch", s)
	}
	return job{id: s, at: at}, nil
}

// badLine is a line of the input that is no user id.
type badLine struct {
	n      int
	text   string
	reason string
}

// input is what a --from file holds.
type input struct {
	users    []uint64 // ascending, each once
	lines    int
	skipped  int // blank lines and comments
	repeated int // user ids given more than once
	bad      []badLine
}

// readUsers reads one user id per line from r: blank lines and text from
// a # on are skipped, spaces around an id are trimmed, and a line that is
// no canonical user id is collected with its number and why. The whole
// input is read before anything is published, so that a bad line stops a
// job before it began and the progress knows the total.
func readUsers(r io.Reader) (input, error) {
	var in input
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxLineBytes)
	for sc.Scan() {
		in.lines++
		line, _, _ := strings.Cut(sc.Text(), "#")
		line = strings.TrimSpace(line)
		if line == "" {
			in.skipped++
			continue
		}
		id, why := userID(line)
		if why != "" {
			in.bad = append(in.bad, badLine{n: in.lines, text: line, reason: why})
			continue
		}
		in.users = append(in.users, id)
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return in, fmt.Errorf("line %d is longer than %d bytes: not a list of user ids, one per line", in.lines+1, maxLineBytes)
		}
		return in, fmt.Errorf("line %d: %w", in.lines+1, err)
	}
	slices.Sort(in.users)
	n := len(in.users)
	in.users = slices.Compact(in.users)
	in.repeated = n - len(in.users)
	return in, nil
}

// userID parses a user id as the processor reads keys, or says what is
// wrong with it.
func userID(s string) (uint64, string) {
	id, err := topics.ParseUserID([]byte(s))
	if err == nil {
		return id, ""
	}
	var te *topics.Error
	if errors.As(err, &te) && te.Reason == topics.ReasonKeyLeadingZero {
		// Keys are compared as bytes: 007 and 7 would be two users to
		// Kafka's partitioner, so the processor refuses the first.
		return 0, fmt.Sprintf("the leading zero is the problem: user ids are written without one (%s)", strings.TrimLeft(s, "0"))
	}
	return 0, fmt.Sprintf("want a decimal user id, e.g. 42 (%v)", err)
}

// tally counts what became of a job's commands; every field may be read
// while the job runs.
type tally struct {
	total     int64
	start     time.Time
	published atomic.Int64 // acknowledged by Kafka (the client's publish hook)
	answered  atomic.Int64 // with a receipt, a refusal or a failure
	changed   atomic.Int64
	unchanged atomic.Int64
	duplicate atomic.Int64
	refused   atomic.Int64
	failed    atomic.Int64 // not published
	missing   atomic.Int64 // published, no receipt
	progress  atomic.Int64 // ns since the job's start of the last answer or acknowledgement

	mu struct {
		sync.Mutex
		refusals  map[topics.Reason]int
		firstErrs map[string]error // an example of each failure kind
	}
}

func newTally(total int, start time.Time) *tally {
	t := &tally{total: int64(total), start: start}
	t.mu.refusals = make(map[topics.Reason]int)
	t.mu.firstErrs = make(map[string]error)
	return t
}

// OnPublished counts a command Kafka acknowledged: the client's publish
// hook.
func (t *tally) OnPublished(_ client.Published, err error, _ time.Duration) {
	if err == nil {
		t.published.Add(1)
		t.progress.Store(int64(time.Since(t.start)))
	}
}

// record counts r, the answer to one command.
func (t *tally) record(r client.Result) {
	defer func() {
		t.answered.Add(1)
		t.progress.Store(int64(time.Since(t.start)))
	}()
	var refused *client.RefusedError
	switch {
	case r.Err == nil:
		cmd := r.Record.Command
		switch {
		case cmd != nil && cmd.Duplicate:
			t.duplicate.Add(1)
		case cmd != nil && cmd.Changed:
			t.changed.Add(1)
		default:
			t.unchanged.Add(1)
		}
	case errors.As(r.Err, &refused):
		t.refused.Add(1)
		t.mu.Lock()
		t.mu.refusals[refused.Reason]++
		t.example("refused "+string(refused.Reason), r.Err)
		t.mu.Unlock()
	case r.Published.Topic == "": // ApplyAsync's publish failed
		t.failed.Add(1)
		t.mu.Lock()
		t.example("not published", r.Err)
		t.mu.Unlock()
	default:
		t.missing.Add(1)
		t.mu.Lock()
		t.example("no receipt", r.Err)
		t.mu.Unlock()
	}
}

// example keeps the first error of a kind. Called with t.mu held.
func (t *tally) example(kind string, err error) {
	if _, ok := t.mu.firstErrs[kind]; !ok {
		t.mu.firstErrs[kind] = err
	}
}

// bulk is `processor leave|rejoin --from`: it reads the users, publishes
// one command each with ApplyAsync, at most --in-flight unanswered, shows
// the progress on stderr and prints the summary on stdout. It fails (exit
// status 1) when a line was bad, or a command was refused, not published
// or left without a receipt: running the same job again retries exactly
// those.
func bulk(ctx context.Context, op topics.Op, o *commandOptions, stdout, stderr io.Writer) error {
	b := &o.bulk
	var errs []error
	if o.user != "" || o.atNs != "" || o.requestID != "" {
		errs = append(errs, errors.New("--from: the users come from the file and the request id and boundary from --job: give no --user, --at-ns or --request-id"))
	}
	if b.inFlight < 1 {
		errs = append(errs, fmt.Errorf("--in-flight %d: want at least 1", b.inFlight))
	}
	if o.timeout <= 0 {
		errs = append(errs, fmt.Errorf("--timeout %v: must be positive", o.timeout))
	}
	jb, err := parseJob(b.job, op, time.Now())
	if err != nil {
		errs = append(errs, err)
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}

	in, err := readFrom(b.from)
	if err != nil {
		return err
	}
	for i, l := range in.bad {
		if i == maxBadShown {
			fmt.Fprintf(stderr, "%s: ... and %d more bad lines\n", b.from, len(in.bad)-maxBadShown)
			break
		}
		text := l.text
		if len(text) > 40 {
			text = text[:40] + "…"
		}
		fmt.Fprintf(stderr, "%s:%d: %q: %s\n", b.from, l.n, text, l.reason)
	}
	switch {
	case len(in.bad) > 0 && !b.skipBad:
		return fmt.Errorf("%s: %d bad lines (listed above); nothing was published: correct them, or give --skip-bad-lines to publish the %d good user ids",
			b.from, len(in.bad), len(in.users))
	case len(in.users) == 0:
		return fmt.Errorf("%s: no user ids in %d lines: want one decimal user id per line", b.from, in.lines)
	}
	if b.job == "" {
		fmt.Fprintf(stderr, "new job %s: to resume or re-run it, give --job %s\n", jb.id, jb.id)
	}

	// The watcher may read many answers before their acknowledgements
	// come back; keeping more of them than may be in flight means none is
	// left to a scan of its own.
	start := time.Now()
	t := newTally(len(in.users), start)
	c, err := o.client(ctx, client.Unclaimed(max(client.DefaultUnclaimed, 4*b.inFlight)), client.Hooks(t))
	if err != nil {
		return err
	}
	defer c.Close()
	run, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	// remaining counts the users not yet answered; whoever brings it to
	// zero — the last answer, or the feeder stopping early — closes
	// finished.
	var remaining atomic.Int64
	remaining.Store(int64(len(in.users)))
	finished := make(chan struct{})
	var finish sync.Once
	settle := func(n int64) {
		if remaining.Add(-n) == 0 {
			finish.Do(func() { close(finished) })
		}
	}
	// The feeder is this function's: it ends once every user is handed
	// to ApplyAsync or the job is stopped, and is joined below.
	var fed atomic.Int64
	slots := make(chan struct{}, b.inFlight)
	feederDone := make(chan struct{})
	go func() {
		defer close(feederDone)
		for i, user := range in.users {
			select {
			case slots <- struct{}{}:
			case <-run.Done():
				settle(int64(len(in.users) - i))
				return
			}
			fed.Add(1)
			r := client.Request{Op: op, UserID: user, Opts: []client.CommandOpt{client.Intent(jb.id, jb.at)}}
			c.ApplyAsync(run, r, func(res client.Result) {
				t.record(res)
				<-slots
				settle(1)
			})
		}
	}()

	p := newProgress(stderr, op, t, start)
	refresh := time.NewTicker(min(p.every, 200*time.Millisecond))
	defer refresh.Stop()
	stalled := false
wait:
	for {
		select {
		case <-finished:
			break wait
		case <-refresh.C:
		}
		idle := time.Since(start) - time.Duration(t.progress.Load())
		if !stalled && idle > o.timeout {
			// Nothing moved for --timeout: what is still waiting gives
			// up, and is reported missing.
			stalled = true
			stop(fmt.Errorf("no progress for --timeout %v", o.timeout))
		}
		if stalled && idle > 2*o.timeout {
			fmt.Fprintf(stderr, "%s job %s: %d commands still unanswered %v after the job stopped; not waiting for them\n",
				op, jb.id, fed.Load()-t.answered.Load(), o.timeout)
			break
		}
		p.tick()
	}
	stop(errors.New("the job ended"))
	<-feederDone // the feeder returns at once on a stopped job
	p.draw(true)
	if ctx.Err() != nil {
		fmt.Fprintf(stderr, "%s job %s: interrupted\n", op, jb.id)
	}
	return summary(stdout, op, jb, b.from, in, t, fed.Load(), time.Since(start), o.timeout)
}

// readFrom reads --from: a file, or stdin for "-".
func readFrom(from string) (input, error) {
	r := io.Reader(os.Stdin)
	if from != "-" {
		f, err := os.Open(from)
		if err != nil {
			return input{}, fmt.Errorf("--from: %w", err)
		}
		defer f.Close()
		r = f
	}
	in, err := readUsers(r)
	if err != nil {
		return in, fmt.Errorf("--from %s: %w", from, err)
	}
	return in, nil
}

// summary prints what became of the job and returns a Failed (exit
// status 1) when anything is left to do.
func summary(w io.Writer, op topics.Op, jb job, from string, in input, t *tally, fed int64, took time.Duration, timeout time.Duration) error {
	done := t.answered.Load()
	fmt.Fprintf(w, "%s job %s: %d users from %s (%d lines: %d blank or comments, %d bad, %d repeated ids) in %v, %.0f/s\n",
		op, jb.id, len(in.users), from, in.lines, in.skipped, len(in.bad), in.repeated, took.Round(time.Millisecond), float64(done)/took.Seconds())
	changed, unchanged := "left now", "already left from this boundary or an earlier one: no change"
	if op == topics.Rejoin {
		changed, unchanged = "rejoined now", "already active: no change"
	}
	notStarted := int64(len(in.users)) - fed
	unanswered := fed - done
	rows := []struct {
		name string
		n    int64
		what string
	}{
		{"applied", t.changed.Load(), changed},
		{"unchanged", t.unchanged.Load(), unchanged},
		{"duplicate", t.duplicate.Load(), "applied before by this job: nothing changed"},
		{"refused", t.refused.Load(), "dead-lettered by the processor, by reason below"},
		{"not published", t.failed.Load() + notStarted, "Kafka did not take the command, or the job stopped first"},
		{"no receipt", t.missing.Load() + unanswered, fmt.Sprintf("published, no answer from the processor in time (--timeout %v without progress)", timeout)},
	}
	for _, r := range rows {
		fmt.Fprintf(w, "  %-14s %9d  %s\n", r.name, r.n, r.what)
	}
	t.mu.Lock()
	reasons := make([]string, 0, len(t.mu.refusals))
	for r := range t.mu.refusals {
		reasons = append(reasons, string(r))
	}
	sort.Strings(reasons)
	for _, r := range reasons {
		fmt.Fprintf(w, "    %-24s %9d\n", r, t.mu.refusals[topics.Reason(r)])
	}
	kinds := make([]string, 0, len(t.mu.firstErrs))
	for k := range t.mu.firstErrs {
		kinds = append(kinds, k)
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		fmt.Fprintf(w, "  e.g. %s: %v\n", k, t.mu.firstErrs[k])
	}
	t.mu.Unlock()
	left := t.refused.Load() + t.failed.Load() + notStarted + t.missing.Load() + unanswered
	switch {
	case left > 0:
		fmt.Fprintf(w, "%d of %d users not done: run the same command again, with --job %s, to retry them (what is done comes back as duplicate)\n",
			left, len(in.users), jb.id)
	case len(in.bad) > 0:
		fmt.Fprintf(w, "every good user done; %d bad lines skipped\n", len(in.bad))
	default:
		fmt.Fprintf(w, "every user done\n")
	}
	if left > 0 || len(in.bad) > 0 {
		return &cmdline.Failed{Code: 1}
	}
	return nil
}

// progress draws a job's progress on stderr: rewritten in place at most
// five times a second on a terminal, a plain line every two seconds
// otherwise (a log, a pipe), and once more at the end.
type progress struct {
	w       io.Writer
	tty     bool
	every   time.Duration
	op      topics.Op
	t       *tally
	start   time.Time
	printed time.Time
}

func newProgress(w io.Writer, op topics.Op, t *tally, start time.Time) *progress {
	p := &progress{w: w, tty: isTerminal(w), op: op, t: t, start: start, printed: start, every: 2 * time.Second}
	if p.tty {
		p.every = 200 * time.Millisecond
	}
	return p
}

// tick draws the line if it is due.
func (p *progress) tick() {
	if time.Since(p.printed) >= p.every {
		p.draw(false)
	}
}

// draw writes the line: done/total, the rate since the start, the
// commands published or waiting for their receipt, the time taken.
func (p *progress) draw(last bool) {
	p.printed = time.Now()
	elapsed := time.Since(p.start)
	done := p.t.answered.Load()
	published := p.t.published.Load()
	// Answers to published commands: every answer but a failed publish.
	pending := published - (done - p.t.failed.Load())
	line := fmt.Sprintf("%s: %d/%d done (%.0f%%), %.0f/s, published %d, receipts pending %d, %v",
		p.op, done, p.t.total, 100*float64(done)/float64(p.t.total), float64(done)/elapsed.Seconds(),
		published, max(pending, 0), elapsed.Round(100*time.Millisecond))
	switch {
	case p.tty && last:
		fmt.Fprintf(p.w, "\r%s\x1b[K\n", line)
	case p.tty:
		fmt.Fprintf(p.w, "\r%s\x1b[K", line)
	default:
		fmt.Fprintln(p.w, line)
	}
}

// isTerminal reports whether w is a terminal (a character device).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
