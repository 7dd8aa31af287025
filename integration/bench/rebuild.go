package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"regexp"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/topics"
)

// rebuildResult is the rebuild of one partition's state from the commands
// topic alone: a processor with an empty data dir is assigned a partition
// whose commands topic holds Commands commands (a leave, then later a
// rejoin, of Commands/2 users) and no signals. Took is the processor's own
// figure, from its log line "partition caught up with its commands" (from
// the assignment to the commands being applied through an end offset
// observed after it); Wall is from the process start to that line.
type rebuildResult struct {
	Commands int
	Took     time.Duration
	Wall     time.Duration
	PeakRSS  int64
	Produce  time.Duration // writing the commands (not measured against the processor)
	Err      string
}

// Rate is commands applied per second.
func (r rebuildResult) Rate() float64 { return ratio(float64(r.Commands), r.Took.Seconds()) }

func (h *harness) rebuildPhase(ctx context.Context) {
	r := &rebuildResult{Commands: h.o.rebuildCommands}
	h.res.Rebuild = r
	if err := h.rebuild(ctx, r); err != nil {
		r.Err = err.Error()
		h.res.errorf("rebuild: %v", err)
		h.printf("rebuild: FAILED: %v", err)
	}
}

func (h *harness) rebuild(ctx context.Context, r *rebuildResult) error {
	set := h.topicSet("rb")
	if err := h.createTopics(ctx, set, 1); err != nil {
		return err
	}
	start := time.Now()
	if err := produceCommands(ctx, h.o.brokers, string(set.Commands), r.Commands); err != nil {
		return err
	}
	r.Produce = time.Since(start)
	h.printf("rebuild: %d commands written in %.1fs; starting a processor with an empty data dir", r.Commands, r.Produce.Seconds())

	addr, err := freeAddr()
	if err != nil {
		return err
	}
	caughtUp, onLine := watchLine(caughtUpLine)
	args := h.processorArgs(h.topic("rb.group"), filepath.Join(h.work, "rebuild", "data"), addr, set, "--pprof")
	began := time.Now()
	c, err := h.procs.start("rebuild", h.logPath("rebuild"), onLine, h.o.processor, args...)
	if err != nil {
		return err
	}
	defer c.stop(30 * time.Second)
	var prof profileJob
	if h.o.profileFor > 0 {
		prof = h.startProfile(ctx, "rebuild", "profile", "http://"+addr, 200*time.Millisecond)
	}
	t := time.NewTimer(10 * time.Minute)
	defer t.Stop()
	var line string
	select {
	case line = <-caughtUp:
	case <-c.done:
		return c.failure()
	case <-t.C:
		return errNoCaughtUp
	case <-ctx.Done():
		return ctx.Err()
	}
	r.Wall = time.Since(began)
	if rss, err := procPeakRSS(c.pid()); err == nil {
		r.PeakRSS = rss
	}
	if _, r.Took, err = parseCaughtUpLine(line); err != nil {
		return err
	}
	h.printf("rebuild: %d commands applied in %v (%s commands/s; %v from process start)",
		r.Commands, r.Took, thousands(r.Rate()), r.Wall.Round(time.Millisecond))
	h.addProfile(ctx, throughputResult{Name: "rebuild", binary: h.o.processor, Profile: prof.wait(h)})
	return nil
}

// produceCommands writes n commands to topic: a leave of users 1..n/2,
// then their rejoins, asynchronously, each to the partition murmur2 gives
// its key (one partition in the rebuild and the handover; bench instances
// spreads the users over all of them).
func produceCommands(ctx context.Context, brokers []string, topic string, n int) error {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ClientID("cohortgate-bench-commands"),
		kgo.DefaultProduceTopic(topic))
	if err != nil {
		return err
	}
	defer cl.Close()
	var fail firstErr
	users := n / 2
	base := time.Now().Add(-time.Hour)
	for i := range n {
		op, user := topics.Leave, uint64(i+1)
		if i >= users {
			op, user = topics.Rejoin, uint64(i-users+1)
		}
		at := base.Add(time.Duration(i) * time.Microsecond)
		cl.Produce(ctx, &kgo.Record{
			Key:       topics.AppendUserID(nil, user),
			Value:     topics.AppendCommand(nil, topics.Command{Op: op, UserID: user, AtNs: uint64(at.UnixNano()), HasAt: true}),
			Timestamp: at,
		}, func(_ *kgo.Record, err error) { fail.set(err) })
	}
	fctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	if err := cl.Flush(fctx); err != nil {
		return err
	}
	return fail.get()
}

// errNoCaughtUp is returned when the rebuilt partition never catches up.
var errNoCaughtUp = errors.New("the processor did not report the partition caught up")

// caughtUpLine matches the processor's log line when a partition caught up.
var caughtUpLine = regexp.MustCompile(`msg="partition caught up with its commands; forwarding"`)

// watchLine returns a channel that receives a child's log line matching
// re (one; later ones are dropped while it is unread) and the line
// callback for procs.start that feeds it.
func watchLine(re *regexp.Regexp) (<-chan string, func(string)) {
	lines := make(chan string, 1)
	return lines, func(line string) {
		if re.MatchString(line) {
			select {
			case lines <- line:
			default:
			}
		}
	}
}

// parseCaughtUpLine reads next_command_offset= and took= from that line.
func parseCaughtUpLine(line string) (next int64, took time.Duration, err error) {
	m := regexp.MustCompile(`\bnext_command_offset=(\d+)\b.*\btook=(\S+)`).FindStringSubmatch(line)
	if m == nil {
		return 0, 0, fmt.Errorf("no next_command_offset= and took= in %q", line)
	}
	if next, err = strconv.ParseInt(m[1], 10, 64); err != nil {
		return 0, 0, err
	}
	took, err = time.ParseDuration(m[2])
	return next, took, err
}

// firstErr keeps the first error reported by any goroutine.
type firstErr struct {
	mu  sync.Mutex
	err error
}

func (f *firstErr) set(err error) {
	if err == nil {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err == nil {
		f.err = err
	}
}

func (f *firstErr) get() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.err
}
