package main

import (
	"context"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cohortgate/cohortgate/integration/workload"
)

// harness is the state of one `bench run`.
type harness struct {
	o      *runOptions
	a      *admin
	procs  procs  // the children still running
	work   string // this run's directory under --work-dir
	res    *results
	outMu  sync.Mutex
	stdout io.Writer

	// in are the pre-loaded inputs the current phase reads.
	in inputs
}

// inputs are a pre-loaded pair of input topics.
type inputs struct {
	signals, commands string
	signalsEnd        offsets // end offsets of the signals topic, end-of-input ticks included
	ids               int     // the workload's signal ids are 0..ids-1
}

// run is `bench run`: the phases in order, each bounded; a phase that
// fails is recorded and the next one runs. The results are appended to
// --out at the end, failures included.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parseRunOptions(args, stderr)
	if err != nil {
		return err
	}
	if o.self == "" {
		if o.self, err = os.Executable(); err != nil {
			return err
		}
	}
	h := &harness{o: o, stdout: stdout, res: &results{Started: time.Now(), Args: withoutFlag(args, "invoked-as")}}
	defer h.procs.stopAll(5 * time.Second)
	h.work, err = filepath.Abs(filepath.Join(o.workDir, o.prefix))
	if err != nil {
		return err
	}
	if err := os.MkdirAll(h.work, 0o755); err != nil {
		return err
	}
	if h.a, err = newAdmin(o.brokers); err != nil {
		return err
	}
	defer h.a.close()
	pctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	_, err = h.a.adm.BrokerMetadata(pctx)
	cancel()
	if err != nil {
		return fmt.Errorf("no Kafka broker answers at %s (start one with `make kafka-start`): %w", joinList(o.brokers), err)
	}

	h.res.Machine = readMachine()
	vctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	h.res.Broker = h.a.brokerVersion(vctx, o.kafkaScript) + " at " + joinList(o.brokers)
	cancel()
	h.printf("work dir %s; broker %s; %s", h.work, h.res.Broker, h.res.Machine.LoadAvg)
	if o.gateResults != "" {
		h.res.Gate, err = readGateResults(o.gateResults)
		if err != nil {
			h.res.errorf("gate results: %v", err)
		}
	}

	if o.hasPhase("agreement") && ctx.Err() == nil {
		h.agreementPhase(ctx)
	}
	if o.hasPhase("throughput") && ctx.Err() == nil {
		h.throughputPhase(ctx)
	}
	if o.hasPhase("latency") && ctx.Err() == nil {
		h.latencyPhase(ctx)
	}
	if o.hasPhase("restore") && ctx.Err() == nil {
		h.restorePhase(ctx)
	}
	if o.hasPhase("rebuild") && ctx.Err() == nil {
		h.rebuildPhase(ctx)
	}
	if !o.keepTopics {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
		h.dropTopics(dctx, o.prefix+".")
		cancel()
	}
	h.res.Finished = time.Now()
	h.res.Machine.LoadAvgEnd = readLoadAvg()
	if ctx.Err() != nil {
		h.res.errorf("interrupted: %v", ctx.Err())
	}
	detailsPath := filepath.Join(h.work, "report.md")
	if err := os.WriteFile(detailsPath, []byte(h.res.details(o)), 0o644); err != nil {
		h.printf("unable to write %s: %v", detailsPath, err)
		detailsPath = ""
	}
	shown := detailsPath
	if rel, err := filepath.Rel(filepath.Dir(mustAbs(o.out)), detailsPath); err == nil && detailsPath != "" {
		shown = rel
	}
	report := h.res.markdown(o, shown)
	fmt.Fprintln(stdout)
	fmt.Fprint(stdout, report)
	if err := appendReport(o.out, report, h.res.trendRow(o)); err != nil {
		return err
	}
	h.printf("results appended to %s (logs and profiles in %s)", o.out, h.work)
	if len(h.res.Errors) > 0 {
		return fmt.Errorf("%d phase(s) failed: %s", len(h.res.Errors), strings.Join(h.res.Errors, "; "))
	}
	return nil
}

// throughputPhase pre-loads the input and does every selected run,
// --rounds times: round 1 does each run once, in the order of --runs, then
// round 2, and so on, so that whatever else the machine does falls on every
// run alike.
func (h *harness) throughputPhase(ctx context.Context) {
	in, load, err := h.preload(ctx, "", h.o.load)
	if err != nil {
		h.res.errorf("pre-load: %v", err)
		return
	}
	h.in, h.res.Load = in, load
	for round := 1; round <= h.o.rounds; round++ {
		for _, name := range h.o.runs {
			if ctx.Err() != nil {
				return
			}
			r := h.throughput(ctx, name, round, h.starter(name))
			if r.Err != "" {
				h.res.errorf("%s round %d: %s", name, round, r.Err)
			}
			h.addProfile(ctx, r)
			h.res.Throughput = append(h.res.Throughput, r)
		}
	}
}

// starter returns how to start the child of run name.
func (h *harness) starter(name string) func(instance, out string) (spawned, error) {
	switch name {
	case runPassthrough:
		return h.startPassthrough(false)
	case runPassthroughEOS:
		return h.startPassthrough(true)
	case runProcessorALO:
		return h.startProcessor(false, 0)
	case runProcessorEOS:
		return h.startProcessor(true, 0)
	case runStreamsGrace:
		return h.startStreams(h.o.streamsGrace)
	default:
		return h.startStreams(0)
	}
}

// preload writes the workload l with integration/loadgen, as its own process, to
// the topics <prefix>signals and <prefix>commands, then an end-of-input
// tick to every signals partition (see writeTicks), and records the end
// offsets of the input topics.
func (h *harness) preload(ctx context.Context, prefix string, l workload.Config) (inputs, loadResult, error) {
	in := inputs{signals: h.topic(prefix + "signals"), commands: h.topic(prefix + "commands"), ids: l.Signals}
	args := []string{"--brokers", joinList(h.o.brokers),
		"--users", strconv.Itoa(l.Users), "--signals", strconv.Itoa(l.Signals),
		"--value-size", strconv.Itoa(l.ValueSize), "--leave-pct", fmtFloat(l.LeavePct),
		"--rejoin-pct", fmtFloat(l.RejoinPct), "--rate", "0", "--seed", strconv.FormatUint(l.Seed, 10),
		"--commands-topic", in.commands, "--signals-topic", in.signals,
		"--cohort-topic", h.topic(prefix + "load.cohort"), "--dlq-topic", h.topic(prefix + "load.dlq"),
		"--changelog-topic", h.topic(prefix + "load.changelog"),
		"--partitions", strconv.Itoa(h.o.partitions)}
	h.printf("pre-load: loadgen %s", joinArgs(args))
	start := time.Now()
	c, err := h.procs.start("loadgen", h.logPath(prefix+"loadgen"), func(line string) {
		h.printf("pre-load: %s", strings.TrimPrefix(line, "loadgen: "))
	}, h.o.loadgen, args...)
	if err != nil {
		return in, loadResult{}, err
	}
	wctx, cancel := context.WithTimeout(ctx, 30*time.Minute)
	defer cancel()
	if err := c.wait(wctx); err != nil {
		c.stop(5 * time.Second)
		return in, loadResult{}, c.failure()
	}
	res := loadResult{Config: l, Partitions: h.o.partitions, Took: time.Since(start), Command: "loadgen " + joinArgs(args)}
	if err := h.writeTicks(ctx, in.signals, uint64(l.Users)); err != nil {
		return in, res, err
	}
	if in.signalsEnd, err = h.a.endOffsets(ctx, in.signals); err != nil {
		return in, res, err
	}
	commandsEnd, err := h.a.endOffsets(ctx, in.commands)
	if err != nil {
		return in, res, err
	}
	res.Signals, res.Commands = in.signalsEnd.sum()-int64(h.o.partitions), commandsEnd.sum()
	if res.Signals != int64(l.Signals) {
		return in, res, fmt.Errorf("the signals topic holds %d records besides the ticks, want %d", res.Signals, l.Signals)
	}
	h.printf("pre-load: %d signals and %d commands in %.1fs", res.Signals, res.Commands, res.Took.Seconds())
	return in, res, nil
}

// printf prints one progress line, stamped with the time since start.
func (h *harness) printf(format string, args ...any) {
	h.outMu.Lock()
	defer h.outMu.Unlock()
	fmt.Fprintf(h.stdout, "bench %6.1fs  %s\n", time.Since(h.res.Started).Seconds(), fmt.Sprintf(format, args...))
}

// topic names a topic, group or id of this run.
func (h *harness) topic(name string) string { return h.o.prefix + "." + name }

// logPath is the log file of a child.
func (h *harness) logPath(name string) string { return filepath.Join(h.work, name+".log") }

// dropTopics deletes the topics of this run starting with prefix, unless
// they are to be kept.
func (h *harness) dropTopics(ctx context.Context, prefixes ...string) {
	if h.o.keepTopics {
		return
	}
	for _, prefix := range prefixes {
		names, err := h.a.topicsWithPrefix(ctx, prefix)
		if err == nil && len(names) > 0 {
			err = h.a.deleteTopics(ctx, names...)
		}
		if err != nil {
			h.printf("unable to delete topics %s*: %v", prefix, err)
		}
	}
}

// mustAbs is path made absolute, or path itself if that fails.
func mustAbs(path string) string {
	if abs, err := filepath.Abs(path); err == nil {
		return abs
	}
	return path
}

// freeAddr returns a loopback address with a port free right now.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// withoutFlag returns args without the flag name and its value, written
// -name value, --name value, -name=value or --name=value.
func withoutFlag(args []string, name string) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := strings.TrimPrefix(strings.TrimPrefix(args[i], "-"), "-")
		switch {
		case a == name && i+1 < len(args):
			i++ // its value
		case a == name, strings.HasPrefix(a, name+"="):
		default:
			out = append(out, args[i])
		}
	}
	return out
}

func joinArgs(args []string) string { return strings.Join(args, " ") }

func fmtFloat(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// thousands formats f rounded, with separators: 1,234,567.
func thousands(f float64) string {
	if f != f { // NaN
		return "–"
	}
	s := strconv.FormatInt(int64(math.Round(f)), 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	for i, r := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(r)
	}
	if neg {
		return "-" + b.String()
	}
	return b.String()
}

// mib formats bytes as MiB.
func mib(b int64) string { return fmt.Sprintf("%.0f MiB", float64(b)/(1<<20)) }
