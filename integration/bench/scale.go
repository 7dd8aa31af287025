package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cohortgate/cohortgate/internal/cmdline"
	"github.com/cohortgate/cohortgate/pkg/fanout"
	"github.com/cohortgate/cohortgate/pkg/gate"
	"github.com/cohortgate/cohortgate/pkg/membership"
	"github.com/cohortgate/cohortgate/topics"
)

// bench scale (make bench-scale): how long a processor takes
// from its start to ready, and how much memory it holds, as the store
// grows to 100M members, with the gate snapshot and by the Pebble scan.
//
// For every size n of --sizes:
//
//  1. build (or reuse) a store of n members with buildStore: membership
//     batches written straight to Pebble, not through Kafka;
//  2. --runs times: remove the gate snapshot, start bin/processor on the
//     store (its embedded broker, empty topics) and time process start →
//     /readyz 200: the restart by the scan; SIGTERM, and the processor
//     writes its gate snapshot as it stops;
//  3. --runs times: start it again, the restart from the snapshot; SIGTERM;
//  4. unless --crash=false, --runs times the restart after kill -9 under
//     a load of leaves, from a snapshot written while running and older
//     than the store, on a clone of the store (scale_crash.go);
//  5. load the snapshot into a gate in this process and time lookups at
//     that size;
//  6. the store's and the snapshot's size on disk.
//
// Each figure of the starts is the median over the runs with its min and
// max; peak RSS is the processor's VmHWM once ready, the largest of the
// runs. The results go to a CSV, a PNG (ready time and RSS against
// members) and a section appended to BENCHMARKS.md.
type scaleOptions struct {
	sizes      []int
	workDir    string
	processor  string
	csv        string
	png        string
	benchmarks string
	phases     string // "all" or "build" (stores only)
	invokedAs  string
	lookups    int
	runs       int // starts of each path (scan, snapshot, crash) per size
	scanRuns   int // starts by the scan per size; 0: none where the size's snapshot exists, else 1 (it writes the snapshot the others start from)
	timeout    time.Duration
	gateOnly   map[int]bool
	merge      bool
	// The crash path: whether it runs, the --gate-snapshot-interval of its
	// processors, and the leaves a second written while they run.
	crash         bool
	crashInterval time.Duration
	crashLoad     int
}

func parseScaleOptions(args []string, stderr io.Writer) (*scaleOptions, error) {
	fs := flag.NewFlagSet("bench scale", flag.ContinueOnError)
	fs.SetOutput(stderr)
	o := &scaleOptions{}
	var sizes string
	fs.StringVar(&sizes, "sizes", "1000000,10000000,30000000,100000000", "members of the stores, comma-separated")
	fs.StringVar(&o.workDir, "work-dir", "bin/scale-work", "where the stores are built (and kept for the next run)")
	fs.StringVar(&o.processor, "processor", "bin/processor", "the processor binary")
	fs.StringVar(&o.csv, "csv", "BENCHMARKS-scale.csv", "the results, one row per size")
	fs.StringVar(&o.png, "png", "BENCHMARKS-scale.png", "the picture: ready time and RSS against members")
	fs.StringVar(&o.benchmarks, "out", "BENCHMARKS.md", "the file the section is appended to; empty: none")
	fs.StringVar(&o.phases, "phases", "all", "all; build: only build the stores; plot: only draw --png from --csv")
	fs.StringVar(&o.invokedAs, "invoked-as", "", "the command line to report (make passes its own)")
	fs.IntVar(&o.lookups, "lookups", 20_000_000, "gate lookups timed at each size")
	fs.IntVar(&o.runs, "runs", 3, "starts of each path at each size (median, min and max are reported)")
	fs.IntVar(&o.scanRuns, "scan-runs", -1, "starts by the scan at each size; -1: --runs; 0: none where the size's snapshot exists (else 1: its stop writes the snapshot the other paths start from; with --merge the earlier scan figures stay); the scan takes minutes at 100M")
	fs.DurationVar(&o.timeout, "ready-timeout", 20*time.Minute, "how long a processor may take to be ready")
	var gateOnly string
	fs.BoolVar(&o.crash, "crash", true, "measure the restart after kill -9 too (a clone of the store, a load of leaves, a snapshot written while running)")
	fs.DurationVar(&o.crashInterval, "crash-snapshot-interval", 5*time.Second, "--gate-snapshot-interval of the crash path's processors; the kill comes a random time up to it after a snapshot written while running")
	fs.IntVar(&o.crashLoad, "crash-load", 2000, "leaves a second written to the commands topic while the crash path's processor runs")
	fs.BoolVar(&o.merge, "merge", false, "keep the rows of --csv for sizes this run does not measure (a run in parts)")
	fs.StringVar(&gateOnly, "gate-only", "", "sizes (of --sizes) measured without a store: the snapshot of a gate built here, "+
		"on an empty store, so the scan is not run (for a size whose store takes too long to build)")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	o.invokedAs = strings.TrimSpace(o.invokedAs) // make passes an empty SCALE_FLAGS as a trailing space
	for _, s := range cmdline.List(sizes) {
		n, err := strconv.Atoi(s)
		if err != nil || n <= 0 {
			return nil, fmt.Errorf("--sizes: %q is not a positive count", s)
		}
		o.sizes = append(o.sizes, n)
	}
	o.gateOnly = make(map[int]bool)
	for _, s := range cmdline.List(gateOnly) {
		n, err := strconv.Atoi(s)
		if err != nil || !slices.Contains(o.sizes, n) {
			return nil, fmt.Errorf("--gate-only: %q is not one of --sizes", s)
		}
		o.gateOnly[n] = true
	}
	if len(o.sizes) == 0 {
		return nil, errors.New("--sizes: no size")
	}
	if o.runs < 1 {
		return nil, fmt.Errorf("--runs: %d is not a positive count", o.runs)
	}
	if o.scanRuns < -1 {
		return nil, fmt.Errorf("--scan-runs: %d is not -1, 0 or a count", o.scanRuns)
	}
	if o.scanRuns == -1 {
		o.scanRuns = o.runs
	}
	if o.crash && (o.crashInterval <= 0 || o.crashLoad <= 0) {
		return nil, fmt.Errorf("--crash-snapshot-interval %v and --crash-load %d: both must be positive", o.crashInterval, o.crashLoad)
	}
	if o.phases != "all" && o.phases != "build" && o.phases != "plot" {
		return nil, fmt.Errorf("--phases: %q is not all, build or plot", o.phases)
	}
	return o, nil
}

// scaleResult is one size's figures. The spreads are over the runs, in
// seconds (CPU: CPU seconds).
type scaleResult struct {
	Members      int
	Runs         int           // starts of each path measured
	BuildTook    time.Duration // 0: the store was cached
	ReadyScan    spread        // process start → /readyz 200, no snapshot
	RestoreScan  spread        // the processor's own restore figure (log), scan
	RSSScan      int64         // VmHWM once ready, scan, the largest of the runs
	ReadySnap    spread        // process start → /readyz 200, from the snapshot
	RestoreSnap  spread        // the processor's own restore figure (log), snapshot
	RSSSnap      int64         // VmHWM once ready, snapshot, the largest of the runs
	CPUScan      spread        // the processor's CPU seconds from start to ready, scan
	CPUSnap      spread        // the same, from the snapshot
	GateOnly     bool          // no store: a gate built by the harness, on an empty store
	WriteSnap    spread        // the snapshot's write at stop (log)
	ReadyCrash   spread        // process start → /readyz 200 after kill -9
	RestoreCrash spread        // the processor's own restore figure (log), after kill -9
	CPUCrash     spread        // the processor's CPU seconds from start to ready, after kill -9
	RSSCrash     int64         // VmHWM once ready, after kill -9, the largest of the runs
	RSSKilled    int64         // VmHWM of the processes killed (under the load, writing snapshots), the largest
	Applied      spread        // commands applied before ready, after kill -9 (its /metrics): again, and those the killed one had not applied
	Again        spread        // of which the commands since the snapshot's label, at most (the processor's log)
	WriteRun     spread        // a snapshot's write while running (log: took=); the commands wait for its held= alone
	GateBytes    int64         // the gate's MemoryBytes after loading the snapshot
	LookupNs     float64       // ns per lookup, serial, 10% members
	StoreBytes   int64
	SnapBytes    int64
	Err          string
}

// starts are the runs of one path at one size.
type starts []startRun

// into sets the figures of the path: ready, restore and CPU spreads, the
// largest peak RSS, and the snapshot writes at stop (those that wrote).
func (ss starts) into(ready, restore, cpu *spread, rss *int64, wrote *spread) {
	var rd, rs, cp, wr []float64
	for _, s := range ss {
		rd, rs, cp = append(rd, s.ready.Seconds()), append(rs, s.restore.Seconds()), append(cp, s.cpu)
		*rss = max(*rss, s.rss)
		if s.wrote > 0 {
			wr = append(wr, s.wrote.Seconds())
		}
	}
	*ready, *restore, *cpu = spreadOf(rd), spreadOf(rs), spreadOf(cp)
	if wrote != nil {
		*wrote = spreadOf(wr)
	}
}

// BytesPerMember is the gate's size over its members.
func (r scaleResult) BytesPerMember() float64 { return ratio(float64(r.GateBytes), float64(r.Members)) }

// LookupsPerSecond is serial lookups per second.
func (r scaleResult) LookupsPerSecond() float64 { return ratio(1e9, r.LookupNs) }

func scale(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseScaleOptions(args, stderr)
	if err != nil {
		return err
	}
	if o.phases == "plot" {
		rs, err := readScaleCSV(o.csv)
		if err != nil {
			return err
		}
		return plotScale(o.png, rs)
	}
	if o.workDir, err = filepath.Abs(o.workDir); err != nil {
		return err
	}
	if err := os.MkdirAll(o.workDir, 0o755); err != nil {
		return err
	}
	printf := func(format string, args ...any) {
		fmt.Fprintf(stdout, "%s scale: %s\n", time.Now().UTC().Format("15:04:05"), fmt.Sprintf(format, args...))
	}
	start := time.Now()
	started := time.Now().UTC()
	load := readLoadAvg()
	var ps procs
	defer ps.stopAll(time.Minute)
	var results, earlier []scaleResult
	prev := make(map[int]scaleResult) // with --merge, the earlier rows of the sizes measured again
	if o.merge {
		if earlier, err = readScaleCSV(o.csv); err != nil {
			return err
		}
		for _, e := range earlier {
			if slices.Contains(o.sizes, e.Members) && e.Err == "" {
				prev[e.Members] = e
			}
		}
		earlier = slices.DeleteFunc(earlier, func(r scaleResult) bool { return slices.Contains(o.sizes, r.Members) })
	}
	all := func() []scaleResult {
		out := append(slices.Clone(earlier), results...)
		slices.SortFunc(out, func(a, b scaleResult) int { return a.Members - b.Members })
		return out
	}
	for _, n := range o.sizes {
		if ctx.Err() != nil {
			break
		}
		r := scaleOne(ctx, o, &ps, n, printf)
		if p, ok := prev[n]; ok && r.Err == "" && !r.GateOnly && r.ReadyScan.N == 0 {
			// Not scanned this time (--scan-runs 0): the earlier figures stay.
			r.ReadyScan, r.RestoreScan, r.CPUScan, r.RSSScan, r.WriteSnap = p.ReadyScan, p.RestoreScan, p.CPUScan, p.RSSScan, p.WriteSnap
		}
		if r.Err != "" {
			printf("%d members: FAILED: %s", n, r.Err)
		}
		results = append(results, r)
		if o.phases == "build" {
			continue
		}
		if err := writeScaleCSV(o.csv, all()); err != nil {
			return err
		}
	}
	if o.phases == "build" {
		return nil
	}
	if err := plotScale(o.png, all()); err != nil {
		return fmt.Errorf("unable to draw %s: %w", o.png, err)
	}
	report := scaleMarkdown(o, all(), started, time.Since(start), load, readLoadAvg())
	fmt.Fprint(stdout, "\n"+report)
	if o.benchmarks != "" {
		if err := appendReport(o.benchmarks, report, ""); err != nil { // no trend row: the trend table is of the throughput runs
			return err
		}
	}
	printf("wrote %s, %s%s in %v", o.csv, o.png, map[bool]string{true: ", " + o.benchmarks}[o.benchmarks != ""], time.Since(start).Round(time.Second))
	for _, r := range results {
		if r.Err != "" {
			return errors.New("some sizes failed; see the table")
		}
	}
	return nil
}

// scaleOne measures one size.
func scaleOne(ctx context.Context, o *scaleOptions, ps *procs, n int, printf func(string, ...any)) scaleResult {
	r := scaleResult{Members: n}
	dir := filepath.Join(o.workDir, "members-"+strconv.Itoa(n))
	if o.gateOnly[n] {
		return gateOnlyOne(ctx, o, ps, n, dir, printf)
	}
	buildStart := time.Now()
	took, err := buildBulkStore(ctx, dir, n, func(done int) {
		el := time.Since(buildStart).Seconds()
		printf("%d members: building the store: %d written in %.0fs (%s members/s)", n, done, el, thousands(float64(done)/el))
	})
	if err != nil {
		r.Err = "build: " + err.Error()
		return r
	}
	r.BuildTook = took
	r.StoreBytes = dirSize(filepath.Join(dir, "membership"))
	printf("%d members: store of %s (built in %.1fs; 0 = cached)", n, mib(r.StoreBytes), took.Seconds())
	if o.phases == "build" {
		return r
	}
	snap := filepath.Join(dir, snapshotFile)
	r.Runs = o.runs
	scanRuns := o.scanRuns
	if _, err := os.Stat(snap); scanRuns == 0 && err != nil {
		scanRuns = 1 // the other paths need the snapshot its stop writes
	}
	if scanRuns == 0 {
		printf("%d members: no start by the scan (--scan-runs 0): the snapshot there is used", n)
	}
	scans, err := startRuns(ctx, o, ps, dir, "scan", n, scanRuns, func() error {
		if err := os.Remove(snap); err != nil && !errors.Is(err, os.ErrNotExist) {
			return err
		}
		return nil
	}, printf)
	if err != nil {
		r.Err = err.Error()
		return r
	}
	if len(scans) > 0 {
		scans.into(&r.ReadyScan, &r.RestoreScan, &r.CPUScan, &r.RSSScan, &r.WriteSnap)
	}
	if st, err := os.Stat(snap); err == nil {
		r.SnapBytes = st.Size()
	} else {
		r.Err = "no snapshot after the scan's stop: " + err.Error()
		return r
	}

	fromSnaps, err := startRuns(ctx, o, ps, dir, "snapshot", n, o.runs, nil, printf)
	if err != nil {
		r.Err = err.Error()
		return r
	}
	fromSnaps.into(&r.ReadySnap, &r.RestoreSnap, &r.CPUSnap, &r.RSSSnap, nil)

	if o.crash {
		crashes, writes, err := crashRuns(ctx, o, ps, dir, n, printf)
		r.WriteRun = spreadOf(writes)
		if err != nil {
			r.Err = "crash: " + err.Error()
			return r
		}
		var ss starts
		var applied, again []float64
		for _, c := range crashes {
			ss, applied, again = append(ss, c.startRun), append(applied, c.applied), append(again, float64(c.again))
			r.RSSKilled = max(r.RSSKilled, c.rssKilled)
		}
		ss.into(&r.ReadyCrash, &r.RestoreCrash, &r.CPUCrash, &r.RSSCrash, nil)
		r.Applied, r.Again = spreadOf(applied), spreadOf(again)
	}

	printf("%d members: timing %d lookups on the snapshot's gate", n, o.lookups)
	r.GateBytes, r.LookupNs, err = timeLookups(snap, n, o.lookups)
	if err != nil && r.Err == "" {
		r.Err = "lookups: " + err.Error()
	}
	if st, err := os.Stat(snap); err == nil {
		r.SnapBytes = st.Size()
	}
	printf("%d members: ready %.2fs by the scan, %.2fs from the snapshot, %.2fs after kill -9 (medians of %d); RSS %s / %s / %s; %.1f B/member; %s lookups/s; disk %s + %s",
		n, r.ReadyScan.Median, r.ReadySnap.Median, r.ReadyCrash.Median, r.Runs, mib(r.RSSScan), mib(r.RSSSnap), mib(r.RSSCrash), r.BytesPerMember(),
		thousands(r.LookupsPerSecond()), mib(r.StoreBytes), mib(r.SnapBytes))
	return r
}

// bulkStoreFormat names the shape of the stores buildBulkStore makes; a
// cached store of another shape is rebuilt.
//
// v2: the same store, whose embedded broker log is kept beside it from its
// first start on (a v1 store lost it at every start, which the store's
// recorded commands topic ID no longer allows).
const bulkStoreFormat = "bulk v2: random ids in key order; one open leave and a processor-like note per member\n"

// buildBulkStore makes, in dataDir/membership, a store of n members
// (memberIDs), each of whom has left once (one open episode) and carries a
// note like the one the processor writes with each command, through
// membership.Bulk: each member written whole, without the read and the
// identity a command costs, so that 100M members build in minutes rather
// than hours. Unless dataDir already holds one of the same format. It
// returns how long the build took (0 when cached). The restore scans in key
// order whatever the write order.
func buildBulkStore(ctx context.Context, dataDir string, n int, progress func(done int)) (time.Duration, error) {
	marker := filepath.Join(dataDir, "bench-store-complete")
	if b, err := os.ReadFile(marker); err == nil && string(b) == bulkStoreFormat {
		return 0, nil
	}
	if err := os.RemoveAll(dataDir); err != nil {
		return 0, err
	}
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return 0, err
	}
	start := time.Now()
	// NoSync: the build is not what is measured; Close makes it durable.
	s, err := membership.Open(filepath.Join(dataDir, "membership"), &membership.Options{NoSync: true})
	if err != nil {
		return 0, err
	}
	ids := memberIDs(n)
	const batchSize = 100_000
	const baseNs = 1_764_633_600_000_000_000
	lastPrint := time.Now()
	var note []byte
	for from := 0; from < n; from += batchSize {
		if err := ctx.Err(); err != nil {
			s.Close()
			return 0, err
		}
		b := s.NewBulk()
		for i := from; i < min(from+batchSize, n); i++ {
			at := uint64(baseNs + i)
			note = topics.AppendNote(note[:0], topics.Note{
				Command: &topics.CommandRef{Op: "leave", AtNs: at, Topic: "membership.commands",
					Partition: int32(i % 6), Offset: int64(i / 6), RequestID: "r-" + strconv.Itoa(i), Changed: true},
				Receipt: &topics.Receipt{AppliedAtNs: int64(at) + 5_000_000, SignalsPartition: int32(i % 6), SignalsOffset: int64(i)},
			})
			m := membership.Member{
				CommunityMembership: membership.CommunityMembership{UserID: ids[i], Status: membership.Left, LeftAtNs: at},
				Note:                note,
			}
			if err := b.Put(m); err != nil {
				b.Close()
				s.Close()
				return 0, err
			}
		}
		if err := b.Commit(); err != nil {
			s.Close()
			return 0, err
		}
		if time.Since(lastPrint) >= 5*time.Second {
			lastPrint = time.Now()
			progress(min(from+batchSize, n))
		}
	}
	if err := s.Close(); err != nil {
		return 0, err
	}
	if err := os.WriteFile(marker, []byte(bulkStoreFormat), 0o644); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// snapshotFile is where the processor keeps its gate snapshot in its data
// dir (cmd/processor).
const snapshotFile = "gate.snapshot"

// startRun is one processor start, to ready and stopped.
type startRun struct {
	ready   time.Duration // process start → /readyz 200
	restore time.Duration // took= of the "restored membership state" line
	source  string        // source= of that line: snapshot or scan
	rss     int64         // VmHWM once ready
	cpu     float64       // CPU seconds (user+system) from start to ready
	wrote   time.Duration // took= of the "wrote gate snapshot" line at stop, 0 if none
	again   int64         // commands= of the "gate snapshot older than the store" line, 0 if none
}

var (
	restoredSource = regexp.MustCompile(`\bsource=(\w+)`)
	regateLine     = regexp.MustCompile(`msg="gate snapshot older than the store[^"]*".*\bcommands=(\d+)`)
	wroteLine      = regexp.MustCompile(`msg="wrote gate snapshot".*\btook=(\S+)`)
)

// startRuns starts the processor on dir runs times, each after before
// (when not nil), and checks that each start restored its gate by path
// ("scan" or "snapshot"), the processor's own word for it.
func startRuns(ctx context.Context, o *scaleOptions, ps *procs, dir, path string, n, runs int, before func() error, printf func(string, ...any)) (starts, error) {
	var out starts
	for i := range runs {
		if before != nil {
			if err := before(); err != nil {
				return out, err
			}
		}
		st, err := startToReady(ctx, o, ps, dir, fmt.Sprintf("%s-%d-%d", path, n, i+1), printf)
		if err != nil {
			return out, fmt.Errorf("%s: %w", path, err)
		}
		if st.source != path {
			return out, fmt.Errorf("a start meant to restore by the %s restored from %q", path, st.source)
		}
		out = append(out, st)
	}
	return out, nil
}

// startToReady starts the processor on dir with its embedded broker, polls
// /readyz every 10 ms until it answers 200, reads its peak RSS, and stops
// it with SIGTERM, waiting for it to exit (it writes its snapshot then).
func startToReady(ctx context.Context, o *scaleOptions, ps *procs, dir, name string, printf func(string, ...any)) (startRun, error) {
	var run startRun
	httpAddr, err := freeAddr()
	if err != nil {
		return run, err
	}
	kafkaAddr, err := freeAddr()
	if err != nil {
		return run, err
	}
	// The embedded broker keeps its log in the data dir, and it stays
	// there from the store's first start on: the store records the
	// commands topic's ID, and a start that found the topic created
	// again would refuse the store (fanout.CommandsRecreatedError). The
	// first start creates the (empty) topics, the later ones find them.
	wrote, onWrote := watchLine(wroteLine)
	c, run, err := launch(ctx, o, ps, dir, name, httpAddr, kafkaAddr, nil, onWrote, printf)
	if err != nil {
		return run, err
	}
	printf("%s: ready in %.2fs (restore %.2fs from the %s), peak RSS %s; stopping", name, run.ready.Seconds(), run.restore.Seconds(), run.source, mib(run.rss))
	stopStart := time.Now()
	c.stop(5 * time.Minute)
	if c.err != nil && !strings.Contains(c.err.Error(), "signal: terminated") {
		printf("%s: exited: %v", name, c.err)
	}
	select {
	case line := <-wrote:
		m := wroteLine.FindStringSubmatch(line)
		if run.wrote, err = time.ParseDuration(m[1]); err != nil {
			return run, err
		}
	default:
	}
	printf("%s: stopped in %.1fs (snapshot written in %v)", name, time.Since(stopStart).Seconds(), run.wrote)
	return run, nil
}

// launch starts the processor on dir with its embedded broker on
// kafkaAddr (keeping whatever log the data dir holds) and extra flags,
// polls /readyz every 10 ms until it answers 200, and reads its peak RSS,
// its CPU seconds and its restore line. It returns the processor running,
// or stopped if it failed; onLine (when not nil) sees every log line.
func launch(ctx context.Context, o *scaleOptions, ps *procs, dir, name, httpAddr, kafkaAddr string, extra []string,
	onLine func(string), printf func(string, ...any)) (*child, startRun, error) {
	var run startRun
	restored, onRestored := watchLine(restoredLine)
	regated, onRegate := watchLine(regateLine)
	lines := func(l string) {
		onRestored(l)
		onRegate(l)
		if onLine != nil {
			onLine(l)
		}
	}
	logPath := filepath.Join(o.workDir, name+".log")
	printf("%s: starting %s (log %s)", name, o.processor, logPath)
	// --stall-halt=0: the liveness check counts a restore as no progress,
	// and a scan of 100M members on a loaded machine outlasts its default
	// 5 minutes (the processor halted mid-scan); the restore is what is
	// measured here.
	args := append([]string{"try", "--data-dir", dir, "--http-addr", httpAddr,
		"--embedded-addr", kafkaAddr, "--api-addr=", "--log-level", "info", "--stall-halt=0"}, extra...)
	t0 := time.Now()
	c, err := ps.start(name, logPath, lines, o.processor, args...)
	if err != nil {
		return nil, run, err
	}
	fail := func(err error) (*child, startRun, error) {
		c.stop(5 * time.Minute)
		return nil, run, err
	}
	url := "http://" + httpAddr + "/readyz"
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(o.timeout)
	lastPrint := time.Now()
	for {
		if c.exited() {
			return fail(c.failure())
		}
		if time.Now().After(deadline) {
			return fail(fmt.Errorf("not ready within %v", o.timeout))
		}
		if err := ctx.Err(); err != nil {
			return fail(err)
		}
		if resp, err := client.Get(url); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Since(lastPrint) >= 5*time.Second {
			lastPrint = time.Now()
			printf("%s: not ready yet after %.0fs", name, time.Since(t0).Seconds())
		}
		time.Sleep(10 * time.Millisecond)
	}
	run.ready = time.Since(t0)
	if rss, err := procPeakRSS(c.pid()); err == nil {
		run.rss = rss
	}
	if cpu, err := procCPU(c.pid()); err == nil {
		run.cpu = cpu.seconds()
	}
	select {
	case line := <-restored:
		if _, run.restore, err = parseRestoreLine(line); err != nil {
			return fail(err)
		}
		if m := restoredSource.FindStringSubmatch(line); m != nil {
			run.source = m[1]
		}
	default:
		return fail(errors.New("ready without a restore line"))
	}
	select {
	case line := <-regated:
		run.again, _ = strconv.ParseInt(regateLine.FindStringSubmatch(line)[1], 10, 64)
	default:
	}
	return c, run, nil
}

// timeLookups loads the snapshot at path into a gate and times lookups,
// serially, of random keys of which one in ten is a member (as the pkg/gate
// benchmark mixed10): the members are the first ids memberIDs draws for n.
func timeLookups(path string, n, lookups int) (gateBytes int64, nsPerLookup float64, err error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, 0, err
	}
	g := gate.New()
	if err := g.Load(f, st.Size(), nil); err != nil {
		return 0, 0, err
	}
	const keys = 1 << 20
	members := rand.New(rand.NewPCG(uint64(n), 0x5eed)) // memberIDs' sequence
	others := rand.New(rand.NewPCG(uint64(n), 0xabad1dea))
	ks := make([]uint64, keys)
	for i := range ks {
		if i%10 == 0 {
			ks[i] = members.Uint64()
		} else {
			ks[i] = others.Uint64()
		}
	}
	rand.New(rand.NewPCG(1, 2)).Shuffle(len(ks), func(i, j int) { ks[i], ks[j] = ks[j], ks[i] })
	allowed := 0
	t0 := time.Now()
	for i := range lookups {
		if g.Allows(ks[i&(keys-1)], 1<<62) { // after every member's leave
			allowed++
		}
	}
	took := time.Since(t0)
	runtime.KeepAlive(allowed)
	return g.MemoryBytes(), float64(took.Nanoseconds()) / float64(lookups), nil
}

// gateOnlyOne measures size n without a store: the harness builds a gate
// of the members a store of n would hold, saves it labelled with no
// checkpoints (those of an empty store), and starts the processor on an
// empty store, which loads it. Only the snapshot path is measured.
func gateOnlyOne(ctx context.Context, o *scaleOptions, ps *procs, n int, dir string, printf func(string, ...any)) scaleResult {
	r := scaleResult{Members: n, GateOnly: true}
	if err := os.RemoveAll(dir); err != nil {
		r.Err = err.Error()
		return r
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		r.Err = err.Error()
		return r
	}
	start := time.Now()
	snap := filepath.Join(dir, snapshotFile)
	if err := writeGateOnly(ctx, snap, n, func(done int) {
		printf("%d members: building a gate (no store): %d set in %.0fs", n, done, time.Since(start).Seconds())
	}); err != nil {
		r.Err = "gate: " + err.Error()
		return r
	}
	r.BuildTook = time.Since(start)
	runtime.GC()
	r.Runs = o.runs
	fromSnaps, err := startRuns(ctx, o, ps, dir, "snapshot", n, o.runs, nil, printf)
	if err != nil {
		r.Err = err.Error()
		return r
	}
	fromSnaps.into(&r.ReadySnap, &r.RestoreSnap, &r.CPUSnap, &r.RSSSnap, &r.WriteSnap)
	printf("%d members: timing %d lookups on the snapshot's gate", n, o.lookups)
	var lerr error
	r.GateBytes, r.LookupNs, lerr = timeLookups(snap, n, o.lookups)
	if lerr != nil && r.Err == "" {
		r.Err = "lookups: " + lerr.Error()
	}
	if st, err := os.Stat(snap); err == nil {
		r.SnapBytes = st.Size()
	}
	r.StoreBytes = dirSize(filepath.Join(dir, "membership"))
	printf("%d members (gate only): ready %.2fs from the snapshot (median of %d); RSS %s; %.1f B/member; %s lookups/s; snapshot %s",
		n, r.ReadySnap.Median, r.Runs, mib(r.RSSSnap), r.BytesPerMember(), thousands(r.LookupsPerSecond()), mib(r.SnapBytes))
	return r
}

// writeGateOnly saves, at path, a gate of the members buildBulkStore
// would write for n (the same ids, unsorted, and boundaries by rank),
// labelled as reflecting an empty store.
func writeGateOnly(ctx context.Context, path string, n int, progress func(done int)) error {
	g := gate.New(gate.Capacity(n))
	rng := rand.New(rand.NewPCG(uint64(n), 0x5eed)) // memberIDs' sequence
	const baseNs = 1_764_633_600_000_000_000
	eps := make([]gate.Episode, 1)
	lastPrint := time.Now()
	for i := 0; i < n; {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		id := rng.Uint64()
		if id == 0 {
			continue
		}
		eps[0] = gate.Episode{LeftAtNs: uint64(baseNs + i), RejoinedAtNs: gate.OpenEnd}
		if err := g.Set(id, eps); err != nil {
			return err
		}
		i++
		if i%1_000_000 == 0 && time.Since(lastPrint) >= 5*time.Second {
			lastPrint = time.Now()
			progress(i)
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<20)
	if _, err := g.Save(w, fanout.SnapshotLabel("membership.commands", nil)); err != nil {
		f.Close()
		return err
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
