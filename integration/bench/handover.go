package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/integration/workload"
	"github.com/cohortgate/cohortgate/internal/cmdline"
	"github.com/cohortgate/cohortgate/topics"
)

// bench handover: how long an owner with an empty data dir
// takes from the assignment of a partition to its first forwarded signal,
// when the partition's history is --commands commands (a leave, then a
// rejoin, of --commands/2 users), by the replay of the commands from
// offset 0 (--handover-replay) and by the restore from the changelog.
//
//  1. One partition of every topic; the commands are written, then a
//     first processor (the seed) applies them, writes their changelog
//     records and forwards one signal, so that its group commits the
//     judged offset; it stops cleanly.
//  2. --reps rounds, each starting a processor with an empty data dir in
//     the same group, once replaying and once restoring (interleaved), a
//     fresh signal stamped a minute ago waiting for each: the time from
//     the processor's log line "partitions assigned" to the signal read,
//     read_committed, from the output topic; the processor's CPU seconds
//     at that moment; and its own figures (caught up, restore). Each
//     stops cleanly before the next starts.
//
// The changelog is as the seed left it: two records per user (compaction
// has not run on the active segment), the worst case for the restore.
//
// Step 1 takes minutes; --keep keeps its topics and group, and --reuse
// runs step 2 on them again. --baseline names a second processor binary
// whose restores run interleaved with --processor's in every round (an
// A/B of a change), and --profile takes a CPU profile of each restoring
// processor from its start.
type handoverOptions struct {
	brokers       []string
	processor     string
	baseline      string // a second binary restoring in each round, or ""
	workDir       string
	commands      int
	reps          int
	replay        bool // a replaying owner in each round
	timeout       time.Duration
	keep          bool
	reuse         string        // the name of kept topics and group, or ""
	profile       time.Duration // CPU profile of each restore for this long, or 0
	restoreMemory string        // --restore-memory of every restoring processor, or ""
}

func handover(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("bench handover", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := &handoverOptions{}
	var brokers string
	fs.StringVar(&brokers, "brokers", os.Getenv("KAFKA_BROKERS"), "seed brokers (default $KAFKA_BROKERS)")
	fs.StringVar(&o.processor, "processor", "bin/processor", "the processor binary")
	fs.StringVar(&o.workDir, "work-dir", "bin/handover-work", "data dirs and logs")
	fs.IntVar(&o.commands, "commands", 2_000_000, "commands in the partition: a leave and a rejoin of commands/2 users")
	fs.IntVar(&o.reps, "reps", 3, "rounds of (replay, restore)")
	fs.DurationVar(&o.timeout, "timeout", 10*time.Minute, "how long one processor may take to forward")
	fs.BoolVar(&o.keep, "keep", false, "keep the topics and the group (their name is printed), for --reuse")
	fs.StringVar(&o.reuse, "reuse", "", "the name (handover-...) of the topics and group a --keep run kept, its --commands written and judged: skip the seed")
	fs.StringVar(&o.baseline, "baseline", "", "a second processor binary restoring in each round, interleaved with --processor's (path changelog-baseline)")
	fs.BoolVar(&o.replay, "replay", true, "run a replaying owner in each round")
	fs.StringVar(&o.restoreMemory, "restore-memory", "", "--restore-memory of every restoring processor (default: theirs)")
	fs.DurationVar(&o.profile, "profile", 0, "take a CPU profile of each restoring processor for this long from its start (<work-dir>/<run>.cpu.pprof)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	o.brokers = cmdline.List(brokers)
	if len(o.brokers) == 0 {
		return errors.New("--brokers: none (set KAFKA_BROKERS)")
	}
	if o.reuse != "" {
		o.keep = true
	}
	hb := &handoverBench{o: o, out: stdout, start: time.Now()}
	return hb.run(ctx)
}

type handoverBench struct {
	o     *handoverOptions
	out   io.Writer
	start time.Time
	procs procs
	a     *admin
	set   topics.Set
	group string
}

func (hb *handoverBench) printf(format string, args ...any) {
	fmt.Fprintf(hb.out, "handover %6.1fs  %s\n", time.Since(hb.start).Seconds(), fmt.Sprintf(format, args...))
}

// handoverRun is one empty owner's take-over.
type handoverRun struct {
	mode     string        // "replay" or "changelog"
	first    time.Duration // assignment → first forwarded signal read
	cpu      float64       // the processor's CPU seconds at that moment
	peakRSS  int64         // the processor's peak resident set (VmHWM) at that moment
	caughtUp time.Duration // the processor's own: assignment → caught up
	restore  string        // its restore line's figures, if any
}

var (
	assignedLine = regexp.MustCompile(`msg="partitions assigned`)
	handoverLine = regexp.MustCompile(`msg="empty owner: `)
)

func (hb *handoverBench) run(ctx context.Context) error {
	o := hb.o
	defer hb.procs.stopAll(30 * time.Second)
	var err error
	if hb.a, err = newAdmin(o.brokers); err != nil {
		return err
	}
	defer hb.a.close()
	name := o.reuse
	if name == "" {
		name = "handover-" + strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	}
	hb.set = workload.Topics(name)
	hb.group = name
	if err := os.MkdirAll(o.workDir, 0o755); err != nil {
		return err
	}
	if !o.keep {
		defer func() {
			dctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			_, _ = hb.a.adm.DeleteTopics(dctx, string(hb.set.Commands), string(hb.set.Signals), string(hb.set.Cohort),
				string(hb.set.DLQ), string(hb.set.Changelog))
			_, _ = hb.a.adm.DeleteGroup(dctx, hb.group)
		}()
	}
	if o.reuse == "" {
		if err := hb.seed(ctx); err != nil {
			return err
		}
	} else if err := hb.waitJudged(ctx, 10*time.Second); err != nil {
		return fmt.Errorf("--reuse %s: %w", o.reuse, err)
	}
	end, _ := hb.a.endOffsets(ctx, string(hb.set.Changelog))
	hb.printf("changelog: %d records", end.sum())

	type path struct{ mode, bin string }
	var paths []path
	if o.replay {
		paths = append(paths, path{"replay", o.processor})
	}
	paths = append(paths, path{"changelog", o.processor})
	if o.baseline != "" {
		paths = append(paths, path{"changelog-baseline", o.baseline})
	}
	var runs []handoverRun
	for rep := 1; rep <= o.reps; rep++ {
		// The restores alternate their order from round to round, so
		// that neither always follows the replay.
		order := slices.Clone(paths)
		if rep%2 == 0 && o.baseline != "" {
			n := len(order)
			order[n-2], order[n-1] = order[n-1], order[n-2]
		}
		for _, p := range order {
			var extra []string
			if p.mode == "replay" {
				extra = append(extra, "--handover-replay")
			} else if o.restoreMemory != "" {
				extra = append(extra, "--restore-memory", o.restoreMemory)
			}
			r, err := hb.take(ctx, fmt.Sprintf("%s-%d", p.mode, rep), p.bin, rep, p.mode != "replay", extra...)
			if err != nil {
				return err
			}
			r.mode = p.mode
			runs = append(runs, r)
			hb.printf("%s %d: first signal forwarded %v after the assignment, %.1f CPU-s, peak RSS %d MiB; caught up in %v%s",
				p.mode, rep, r.first.Round(time.Millisecond), r.cpu, r.peakRSS>>20, r.caughtUp, r.restore)
		}
	}
	hb.report(runs)
	return nil
}

// seed creates the topics, writes the commands and has a first processor
// apply them, until its group committed their judged offset.
func (hb *handoverBench) seed(ctx context.Context) error {
	o := hb.o
	cctx, cancel := context.WithTimeout(ctx, 90*time.Second)
	err := workload.CreateTopics(cctx, hb.a.adm, hb.set, 1, -1)
	cancel()
	if err != nil {
		return err
	}
	if o.keep {
		hb.printf("topics and group %s kept: run again with --reuse %s --commands %d", hb.group, hb.group, o.commands)
	}
	began := time.Now()
	if err := produceCommands(ctx, o.brokers, string(hb.set.Commands), o.commands); err != nil {
		return err
	}
	hb.printf("%d commands (%d users) written in %.1fs; the seed processor applies them", o.commands, o.commands/2, time.Since(began).Seconds())
	seed, err := hb.take(ctx, "seed", o.processor, 0, false, "--handover-replay")
	if err != nil {
		return err
	}
	hb.printf("seed: forwarding %v after its assignment (%.1f CPU-s)", seed.first.Round(time.Millisecond), seed.cpu)
	return hb.waitJudged(ctx, 2*time.Minute)
}

// waitJudged waits, at most within, until the group's committed metadata
// says every command was judged.
func (hb *handoverBench) waitJudged(ctx context.Context, within time.Duration) error {
	return hb.a.waitJudged(ctx, hb.group, hb.set, within, func(judged, total int64, meta string) {
		if judged == total {
			hb.printf("group metadata %q: every command judged", meta)
		}
	})
}

// take starts a processor with an empty data dir, waits for it to forward
// a signal produced for it, stops it, and returns the figures.
// With profile and --profile, it takes a CPU profile of the processor from
// its start.
func (hb *handoverBench) take(ctx context.Context, name, bin string, rep int, profile bool, extra ...string) (handoverRun, error) {
	var r handoverRun
	o := hb.o
	out, err := hb.a.endOffsets(ctx, string(hb.set.Cohort))
	if err != nil {
		return r, err
	}
	value := "handover-" + name
	user := uint64(o.commands + 10 + rep) // never left
	sig := &kgo.Record{Topic: string(hb.set.Signals), Key: topics.AppendUserID(nil, user), Value: []byte(value),
		Timestamp: time.Now().Add(-time.Minute)}
	if err := hb.a.cl.ProduceSync(ctx, sig).FirstErr(); err != nil {
		return r, err
	}
	addr, err := freeAddr()
	if err != nil {
		return r, err
	}
	dir := filepath.Join(o.workDir, name)
	_ = os.RemoveAll(dir)
	assigned := make(chan time.Time, 1)
	caught, onCaught := watchLine(caughtUpLine)
	restored, onRestored := watchLine(handoverLine)
	onLine := func(line string) {
		if assignedLine.MatchString(line) {
			select {
			case assigned <- time.Now():
			default:
			}
		}
		onCaught(line)
		onRestored(line)
	}
	args := []string{"run", "--brokers", joinList(o.brokers), "--group", hb.group, "--data-dir", dir, "--http-addr", addr,
		"--transactional-id", "handover-" + name}
	args = append(args, workload.TopicFlags(hb.set)...)
	args = append(args, extra...)
	profile = profile && o.profile > 0
	if profile {
		args = append(args, "--pprof")
	}
	c, err := hb.procs.start(name, filepath.Join(o.workDir, name+".log"), onLine, bin, args...)
	if err != nil {
		return r, err
	}
	defer c.stop(60 * time.Second)
	if profile {
		// The profile is taken whole before the processor is stopped.
		path := filepath.Join(o.workDir, name+".cpu.pprof")
		done := make(chan error, 1)
		go func() {
			done <- fetchProfile(ctx, "http://"+addr, "profile", 200*time.Millisecond, o.profile, path)
		}()
		defer func() {
			if err := <-done; err != nil {
				hb.printf("%s: profile: %v", name, err)
			} else {
				hb.printf("%s: profile in %s", name, path)
			}
		}()
	}

	cl, err := kgo.NewClient(append(readerOpts(o.brokers), kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{string(hb.set.Cohort): {0: kgo.NewOffset().At(out[0])}}))...)
	if err != nil {
		return r, err
	}
	defer cl.Close()
	tctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	for found := false; !found; {
		fetches := cl.PollFetches(tctx)
		if tctx.Err() != nil {
			if c.exited() {
				return r, c.failure()
			}
			return r, fmt.Errorf("%s: signal not forwarded within %v", name, o.timeout)
		}
		fetches.EachRecord(func(rec *kgo.Record) {
			if string(rec.Value) == value {
				found = true
			}
		})
	}
	seen := time.Now()
	if ticks, err := procCPU(c.pid()); err == nil {
		r.cpu = ticks.seconds()
	}
	if rss, err := procPeakRSS(c.pid()); err == nil {
		r.peakRSS = rss
	}
	select {
	case at := <-assigned:
		r.first = seen.Sub(at)
	default:
		return r, fmt.Errorf("%s: forwarded, but no assignment line in its log", name)
	}
	select {
	case line := <-caught:
		_, r.caughtUp, _ = parseCaughtUpLine(line)
	default:
	}
	select {
	case line := <-restored:
		if i := strings.Index(line, "users="); i >= 0 {
			r.restore = "; " + line[i:]
		}
	default:
	}
	return r, nil
}

func (hb *handoverBench) report(runs []handoverRun) {
	fmt.Fprintf(hb.out, "\nempty owner, one partition of %d commands (%d users): assignment → first forwarded signal, %d repetitions\n\n",
		hb.o.commands, hb.o.commands/2, hb.o.reps)
	fmt.Fprintln(hb.out, "| path | first forward: median (min–max) | CPU-s of the processor: median (min–max) | peak RSS MiB: median (min–max) |")
	fmt.Fprintln(hb.out, "|---|---:|---:|---:|")
	for _, mode := range []string{"replay", "changelog", "changelog-baseline"} {
		var ds []time.Duration
		var cpus, rss []time.Duration // rss: bytes, summarized as durations
		for _, r := range runs {
			if r.mode == mode {
				ds = append(ds, r.first)
				cpus = append(cpus, time.Duration(r.cpu*float64(time.Second)))
				rss = append(rss, time.Duration(r.peakRSS))
			}
		}
		if len(ds) == 0 {
			continue
		}
		d, c, m := summarize(ds), summarize(cpus), summarize(rss)
		fmt.Fprintf(hb.out, "| %s | %.2f s (%.2f–%.2f) | %.1f (%.1f–%.1f) | %d (%d–%d) |\n", mode,
			d.P50.Seconds(), d.Min.Seconds(), d.Max.Seconds(), c.P50.Seconds(), c.Min.Seconds(), c.Max.Seconds(),
			int64(m.P50)>>20, int64(m.Min)>>20, int64(m.Max)>>20)
	}
}
