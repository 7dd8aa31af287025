package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/integration/oracle"
)

// harness is one run of the chaos command: the broker, the work dir, and
// every child process it started, so that all can be killed on exit.
type harness struct {
	o       *options
	out     io.Writer // the table
	log     io.Writer // progress and findings
	brokers []string
	kfake   *kfake.Cluster // nil with external brokers
	runID   string
	root    string
	rmRoot  bool
	cl      *kgo.Client
	adm     *kadm.Client
	cluster *cluster // with --cluster; nil otherwise
	ports   portBook // every instance's HTTP and API addresses

	mu struct {
		sync.Mutex
		children map[*instance]bool
	}
}

func newHarness(ctx context.Context, o *options, out, log io.Writer) (*harness, error) {
	h := &harness{o: o, out: out, log: log, runID: randomID()}
	h.mu.children = make(map[*instance]bool)
	h.brokers = o.brokers
	if len(h.brokers) == 0 {
		// The in-process broker allows short sessions so that tests can
		// lower --session-timeout below Kafka's 6s minimum.
		c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.GroupMinSessionTimeout(time.Second))
		if err != nil {
			return nil, fmt.Errorf("unable to start the in-process kfake broker: %w", err)
		}
		h.kfake, h.brokers = c, c.ListenAddrs()
		fmt.Fprintf(log, "chaos: broker: in-process kfake at %s\n", strings.Join(h.brokers, ","))
	} else {
		fmt.Fprintf(log, "chaos: broker: %s\n", strings.Join(h.brokers, ","))
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.brokers...))
	if err != nil {
		h.close()
		return nil, err
	}
	h.cl, h.adm = cl, kadm.NewClient(cl)
	if o.cluster != "" {
		h.cluster = &cluster{script: o.cluster, cl: h.cl, adm: h.adm, logf: h.logf, timeout: 4 * time.Minute}
	}
	pctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := h.adm.BrokerMetadata(pctx); err != nil {
		h.close()
		return nil, fmt.Errorf("brokers %s do not answer: %w", strings.Join(h.brokers, ","), err)
	}
	h.root = o.workDir
	if h.root == "" {
		if h.root, err = os.MkdirTemp("", "cohortgate-chaos-"); err != nil {
			h.close()
			return nil, err
		}
		h.rmRoot = !o.keep
	} else if err := os.MkdirAll(h.root, 0o755); err != nil {
		h.close()
		return nil, err
	}
	fmt.Fprintf(log, "chaos: run %s: processor %s, work dir %s\n", h.runID, o.processor, h.root)
	return h, nil
}

// adopt and forget track the children, for killAll.
func (h *harness) adopt(in *instance) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.mu.children[in] = true
}

func (h *harness) forget(in *instance) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.mu.children, in)
}

// killAll ends every child process still running.
func (h *harness) killAll() {
	h.mu.Lock()
	children := make([]*instance, 0, len(h.mu.children))
	for in := range h.mu.children {
		children = append(children, in)
	}
	h.mu.Unlock()
	var wg sync.WaitGroup
	for _, in := range children {
		wg.Add(1)
		go func() {
			defer wg.Done()
			in.shutdown()
		}()
	}
	wg.Wait()
}

func (h *harness) close() {
	h.killAll()
	if h.cl != nil {
		h.cl.Close()
	}
	if h.kfake != nil {
		h.kfake.Close()
	}
	if h.rmRoot {
		_ = os.RemoveAll(h.root)
	}
}

func (h *harness) logf(format string, args ...any) {
	fmt.Fprintf(h.log, "%s %s\n", time.Now().Format("15:04:05.000"), fmt.Sprintf(format, args...))
}

// result is what one scenario showed.
type result struct {
	sc       scenario
	rep      oracle.Report
	seconds  float64
	stall    stall          // the longest stretch without forward progress
	floor    *stall         // a broker-fault scenario's floor (floor.go); nil in others
	err      error          // the scenario could not run to its end
	findings []string       // processor misbehaviour seen on the way
	warnings map[string]int // the processors' warning and error lines, by message
	logs     string         // the tails of the processors' logs, when it failed
	soak     *soakResult    // the soak's samples and verdicts; nil in other scenarios
	// known says where to look when the scenario finds damage (where it
	// found leaks of the processor before); it follows a FAIL.
	known string
}

// verdict says whether r passes and why: a scenario passes with no damage
// and no finding; a control passes with the damage it promises; an
// informational control always passes.
func (r result) verdict() (pass bool, why string) {
	damage := r.rep.Damage()
	switch {
	case r.err != nil:
		return false, "ERROR: " + r.err.Error()
	case r.sc.control == "" && damage > 0 && r.known != "":
		return false, "FAIL: damage " + damageWords(r.rep) + "; " + r.known
	case r.sc.control == "" && damage > 0:
		return false, "FAIL: damage " + damageWords(r.rep)
	case r.sc.control == "" && len(r.findings) > 0:
		return false, "FAIL: the processor misbehaved (see findings)"
	case r.soak != nil && r.soak.err != nil:
		return false, "ERROR: soak: " + r.soak.err.Error()
	case r.soak != nil && !allFlat(r.soak.flat):
		return false, "FAIL: not flat: " + notFlat(r.soak.flat)
	case r.sc.control == "":
		return true, "ok"
	case r.sc.informational && damage == 0:
		return true, "no damage, as explained: " + r.sc.control
	case r.sc.informational:
		return true, "damage " + damageWords(r.rep) + " (informational control)"
	case r.sc.shows(r.rep) == 0:
		return false, "FAIL: control did not show its damage (" + r.sc.control + "); damage: " + damageWords(r.rep)
	default:
		return true, "control ok: damage " + damageWords(r.rep) + " (expected " + r.sc.control + ")"
	}
}

// damageWords lists rep's damage, kind by kind.
func damageWords(rep oracle.Report) string {
	var parts []string
	add := func(n int, what string) {
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, what))
		}
	}
	add(rep.Duplicates, "duplicates")
	add(rep.Lost, "lost")
	add(rep.Leaked, "leaked")
	add(rep.Hanging, "hanging")
	add(rep.Unknown, "unknown records")
	add(rep.PoisonNotDLQd, "poison not dead-lettered")
	add(rep.MisroutedNotRepublished, "misrouted not re-published")
	add(rep.ChangelogMismatches, "changelog mismatches")
	add(rep.MissingWindows, "missing windows")
	add(rep.SpuriousWindows, "spurious windows")
	add(rep.Contradictions, "contradictions")
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

// The table: two lines a scenario. The second line's first column is
// empty; its counts are the oracle's other verdicts (see the package
// documentation).
const (
	rowFormat  = "%-26s %10v %10v %10v %10v %8v %8v %8v %8v %6v %8v %6v\n"
	row2Format = "%-26s %10v %10v %10v %10v %8v %8v %8v %8v\n"
)

func (h *harness) header() {
	fmt.Fprintf(h.out, rowFormat, "scenario", "signals_in", "forwarded", "expected", "duplicates", "lost", "leaked", "late", "hanging", "dlq", "seconds", "stall")
	fmt.Fprintf(h.out, row2Format, "", "poison", "unrouted", "unknown", "changelog", "win_miss", "win_spur", "win_cons", "contra")
}

// tableRow prints r's lines of the table.
func (h *harness) tableRow(r result) {
	rep := r.rep
	fmt.Fprintf(h.out, rowFormat, r.sc.name, rep.SignalsIn, rep.Forwarded, rep.Expected, rep.Duplicates,
		rep.Lost, rep.Leaked, rep.Late, rep.Hanging, rep.DLQ, fmt.Sprintf("%.1f", r.seconds),
		fmt.Sprintf("%.1f", r.stall.longest.Seconds()))
	fmt.Fprintf(h.out, row2Format, "", rep.PoisonNotDLQd, rep.MisroutedNotRepublished, rep.Unknown, rep.ChangelogMismatches,
		rep.MissingWindows, rep.SpuriousWindows, rep.ConservativeWindows, rep.Contradictions)
}

func (h *harness) row(r result) {
	h.tableRow(r)
	pass, why := r.verdict()
	if why != "ok" {
		fmt.Fprintf(h.out, "%-26s %s\n", "", why)
	}
	if line := r.floorLine(); line != "" {
		fmt.Fprintf(h.out, "%-26s %s\n", "", line)
	}
	if d := r.rep.Details(); d != "" {
		for _, line := range strings.Split(strings.TrimRight(d, "\n"), "\n") {
			fmt.Fprintf(h.out, "%-26s   %s\n", "", line)
		}
	}
	for _, f := range r.findings {
		fmt.Fprintf(h.out, "%-26s   finding: %s\n", "", f)
	}
	if s := r.soak; s != nil {
		fmt.Fprintf(h.out, "\nsoak: %d samples (%d missed) over %v; CSV %s, PNG %s\n", len(s.samples), s.missed, soakSpan(s.samples), s.csv, s.png)
		if len(s.loads) > 0 {
			fmt.Fprintf(h.out, "soak: the machine's load average (1 min, %d cores) at the samples: %s\n", runtime.NumCPU(), spread(s.loads))
		}
		printFlat(h.out, s.flat)
		fmt.Fprintln(h.out)
	}
	msgs := make([]string, 0, len(r.warnings))
	for m := range r.warnings {
		msgs = append(msgs, m)
	}
	slices.Sort(msgs)
	for _, m := range msgs {
		fmt.Fprintf(h.out, "%-26s   processor log: %d × %s\n", "", r.warnings[m], m)
	}
	if !pass && r.logs != "" {
		fmt.Fprintf(h.out, "--- processor logs of %s (tails) ---\n%s\n--- end of logs ---\n", r.sc.name, r.logs)
	}
}

// summary prints the table again with a verdict per scenario, and reports
// whether everything passed.
func (h *harness) summary(results []result) bool {
	fmt.Fprintf(h.out, "\nsummary (run %s, %d signals over %d users, %.3g%% leave, %.3g%% rejoin, %s, seed %d, brokers %s):\n",
		h.runID, h.o.signals, h.o.users, h.o.leavePct, h.o.rejoinPct, h.hostileWords(), h.o.seed, h.brokerKind())
	h.header()
	all := true
	failed := 0
	for _, r := range results {
		h.tableRow(r)
	}
	fmt.Fprintln(h.out)
	for _, r := range results {
		pass, why := r.verdict()
		if !pass {
			all = false
			failed++
		}
		fmt.Fprintf(h.out, "  %-26s %s\n", r.sc.name, why)
	}
	if all {
		fmt.Fprintf(h.out, "chaos: PASS: %d scenarios\n", len(results))
	} else {
		fmt.Fprintf(h.out, "chaos: FAIL: %d of %d scenarios\n", failed, len(results))
	}
	return all
}

func (h *harness) hostileWords() string {
	if h.o.hostile.Scenes == 0 {
		return "no hostile mix"
	}
	return fmt.Sprintf("%d hostile scenes (%s)", h.o.hostile.Scenes, h.o.hostile.Shares)
}

func (h *harness) brokerKind() string {
	if h.kfake != nil {
		return "in-process kfake"
	}
	return strings.Join(h.brokers, ",")
}

// replication is the replication factor of the scenarios' topics: 3 on
// the cluster, 1 on a single broker.
func (h *harness) replication() int16 {
	if h.cluster != nil {
		return 3
	}
	return 1
}

func randomID() string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
