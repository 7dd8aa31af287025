package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kprom"

	"github.com/cohortgate/cohortgate/internal/cmdline"
	"github.com/cohortgate/cohortgate/pkg/fanout"
	"github.com/cohortgate/cohortgate/pkg/kafkasec"
	"github.com/cohortgate/cohortgate/pkg/membership"
	"github.com/cohortgate/cohortgate/topics"
)

// runOptions are the flags of `processor run`.
type runOptions struct {
	brokers        string
	embedded       bool // try: serve the embedded broker; never set by a flag of run
	embeddedAddr   string
	group          string
	dataDir        string
	httpAddr       string
	apiAddr        string
	apiTokenFile   string
	topics         topicFlags
	routes         routeFlags
	partitions     int
	replication    int
	createTopics   bool
	exactlyOnce    bool
	txnID          string
	grace          time.Duration
	maxFutureSkew  time.Duration
	alignInterval  time.Duration
	commitInterval time.Duration
	snapEvery      time.Duration
	holdMaxBytes   int64
	sessionTimeout time.Duration
	stallTimeout   time.Duration
	stallHalt      time.Duration
	unsafeNoSync   bool
	unsafeSkipCmds bool
	unsafeLSO      bool
	unsafeNoWindow bool
	unsafeNoIDs    bool
	unsafeNoTopo   bool
	unsafeClock    string
	handoverReplay bool
	restorePar     int
	restoreMemory  int64
	logLevel       string
	logFormat      string
	pprof          bool
	security       kafkasec.Config
	// passwordOnCmdLine: --kafka-sasl-password was a flag, visible in the
	// process list, rather than its environment variable.
	passwordOnCmdLine bool
}

// topicFlags are the topic-name flags shared by every subcommand.
type topicFlags struct {
	commands, signals, cohort, dlq, changelog string
}

func (t *topicFlags) register(f *flags) {
	d := topics.Defaults()
	f.StringVar(&t.commands, "commands-topic", string(d.Commands), "topic of leave/rejoin commands (key user id, JSON value)")
	f.StringVar(&t.signals, "signals-topic", string(d.Signals), "topic of engagement signals (key user id, opaque value)")
	f.StringVar(&t.cohort, "cohort-topic", string(d.Cohort), "topic the allowed signals are forwarded to, unchanged")
	f.StringVar(&t.dlq, "dlq-topic", string(d.DLQ), "dead-letter topic for records that cannot be processed")
	f.StringVar(&t.changelog, "changelog-topic", string(d.Changelog), "compacted topic of per-user state for the purge job")
}

func (t *topicFlags) set() topics.Set {
	return topics.Set{
		Commands: topics.Topic(t.commands), Signals: topics.Topic(t.signals),
		Cohort: topics.Topic(t.cohort), DLQ: topics.Topic(t.dlq), Changelog: topics.Topic(t.changelog),
	}
}

// routeFlags is --route, repeatable, each value IN=OUT or a comma list of
// them (as its variable, COHORTGATE_ROUTES, is).
type routeFlags []topics.Route

func (r *routeFlags) String() string {
	var s []string
	for _, rt := range *r {
		s = append(s, rt.String())
	}
	return strings.Join(s, ",")
}

func (r *routeFlags) Set(v string) error {
	for _, s := range cmdline.List(v) {
		rt, err := topics.ParseRoute(s)
		if err != nil {
			return err
		}
		*r = append(*r, rt)
	}
	return nil
}

// topicSet is the topics of the run: with --route, the first route
// replaces --signals-topic and --cohort-topic, and the others follow it.
func (o *runOptions) topicSet() topics.Set {
	s := o.topics.set()
	if len(o.routes) > 0 {
		s.Signals, s.Cohort = o.routes[0].In, o.routes[0].Out
		s.Routes = append([]topics.Route(nil), o.routes[1:]...)
	}
	return s
}

const runSynopsis = `Consume engagement signals and membership commands from the Kafka cluster
at --brokers, forward the signals of users who have not left to the cohort
topic, and record every leave durably. To try cohortgate out without a cluster, use
processor try (make run): it serves an embedded broker.`

const trySynopsis = `Run the processor on an embedded Kafka-protocol broker (franz-go's kfake)
at --embedded-addr, for trying cohortgate out: never production. Its log
stays in --data-dir. For a real cluster, use processor run --brokers=….`

// modeName is the command of a mode: try serves the embedded broker, run
// needs brokers.
func modeName(embedded bool) string {
	if embedded {
		return "try"
	}
	return "run"
}

// defineRun defines the flags of run (embedded false) or try on f. Only
// run has --brokers and the Kafka security flags; only try has
// --embedded-addr: neither mode can be reached with the other's flags.
func defineRun(f *flags, o *runOptions, embedded bool) {
	o.embedded = embedded
	if embedded {
		f.StringVar(&o.embeddedAddr, "embedded-addr", "127.0.0.1:9092", "address of the embedded broker (loopback only)")
	} else {
		f.StringVar(&o.brokers, "brokers", "", "comma-separated seed brokers (host:port), required; for an embedded broker use processor try")
	}
	f.StringVar(&o.group, "group", fanout.DefaultGroup, "consumer group of the signals topic")
	dataDirUsage := "directory of the local membership store"
	if embedded {
		dataDirUsage += " and of the embedded broker's log"
	}
	f.StringVar(&o.dataDir, "data-dir", "cohortgate-data", dataDirUsage)
	f.StringVar(&o.httpAddr, "http-addr", "127.0.0.1:8080", "address of /metrics, /healthz and /readyz (and /debug/pprof/ with --pprof): for Prometheus and probes; no personal data")
	apiDefault, apiUsage := "", "address of the membership API (/v1/members/{user_id}, /v1/partitions), which needs the bearer token of --api-token-file; empty: not served"
	if embedded {
		apiDefault = "127.0.0.1:8081"
	}
	f.StringVar(&o.apiAddr, "api-addr", apiDefault, apiUsage)
	f.StringVar(&o.apiTokenFile, "api-token-file", "", "file holding the bearer token of the membership API, read on every request; empty: --data-dir/"+apiTokenFileName+", created with a random token when absent")
	o.topics.register(f)
	f.Var(&o.routes, "route", "a gated path IN=OUT, repeatable: signals of topic IN are forwarded to OUT; every IN is co-partitioned with the commands. "+
		"The first replaces --signals-topic and --cohort-topic; none: one route, --signals-topic to --cohort-topic")
	f.IntVar(&o.partitions, "partitions", fanout.DefaultPartitions, "partitions of topics the processor creates")
	f.IntVar(&o.replication, "replication-factor", -1, "replication factor of topics the processor creates; -1: the broker's default")
	f.BoolVar(&o.createTopics, "create-topics", true, "create missing topics at start")
	f.BoolVar(&o.exactlyOnce, "exactly-once", true, "forward in Kafka transactions (exactly once); false: at least once")
	f.StringVar(&o.txnID, "transactional-id", "", "transactional ID of this instance; empty: cohortgate-<id kept in the data dir>")
	f.DurationVar(&o.grace, "grace", fanout.DefaultGrace, "how late a command may arrive after a signal's event time and still gate it; each signal waits this long")
	f.DurationVar(&o.maxFutureSkew, "max-future-skew", fanout.DefaultMaxFutureSkew, "signals stamped further ahead of this clock go to the DLQ")
	f.DurationVar(&o.alignInterval, "align-interval", fanout.DefaultAlignInterval, "how often the commands topic's end offsets are observed")
	f.DurationVar(&o.commitInterval, "commit-interval", fanout.DefaultCommitInterval, "how long a transaction collects records")
	f.DurationVar(&o.snapEvery, "gate-snapshot-interval", time.Minute, "how often, at most, the gate snapshot is also written while running "+
		"(when commands were applied since), so that a start after a crash loads it instead of scanning the store; commands wait while the gate is copied for it (the copy, as large as the gate's table, is held until written); 0: only at a clean stop")
	f.Int64Var(&o.holdMaxBytes, "hold-max-bytes", fanout.DefaultHoldMaxBytes, "bytes of signals held per partition before its fetching pauses")
	f.DurationVar(&o.sessionTimeout, "session-timeout", 45*time.Second, "consumer group session timeout: how long a silent instance keeps its partitions")
	f.DurationVar(&o.stallTimeout, "stall-timeout", fanout.DefaultStallTimeout, "how long the processor may make no progress (cycles aborting, fetches failing, signals undecided) before /readyz says 503 and why")
	f.DurationVar(&o.stallHalt, "stall-halt", fanout.DefaultStallHalt, "how long such a stall may last before the processor halts (exits non-zero, for its orchestrator to restart it); 0: never")
	f.BoolVar(&o.unsafeNoSync, "unsafe-no-sync", false, "UNSAFE, for chaos control runs only: do not fsync the membership store")
	f.BoolVar(&o.unsafeSkipCmds, "unsafe-skip-commands", false, "UNSAFE, for chaos control runs only: start owned commands partitions at their end, as if commands were lost")
	f.BoolVar(&o.unsafeLSO, "unsafe-observe-lso", false, "UNSAFE, for chaos control runs only: align signals with the commands' last stable offset, so a transaction left open lets them through")
	f.BoolVar(&o.unsafeNoWindow, "unsafe-no-window-recovery", false, "UNSAFE, for chaos control runs only: do not recover earlier owners' late-leave windows from the changelog")
	f.BoolVar(&o.unsafeNoIDs, "unsafe-restore-without-identities", false, "UNSAFE, for chaos control runs only: restore an empty owner's users from the changelog without their command identities, so that a command delivered again is applied as new")
	f.BoolVar(&o.unsafeNoTopo, "unsafe-ignore-topology", false, "UNSAFE, for chaos control runs only: go on under the partition counts found at start when the topics grow, so commands in new partitions are read by nobody")
	f.StringVar(&o.unsafeClock, "unsafe-clock-offset-file", "", "UNSAFE, for chaos runs only: the wall clock this processor reads is the system's plus the duration in this file (60s, -3s; re-read every 20ms), so that a run can step it")
	f.IntVar(&o.restorePar, "restore-parallel", 0, "partitions restored from the changelog side by side on an owner with no state for them; 0: as many as the Go runtime's GOMAXPROCS")
	f.Int64Var(&o.restoreMemory, "restore-memory", fanout.DefaultRestoreMemory, "bytes the restores side by side may hold of the changelog's restore headers (each takes its estimate before it reads, more while there is room; beyond, it spills them to files in the data dir)")
	f.BoolVar(&o.handoverReplay, "handover-replay", false, "on a partition this instance has no state for, replay its commands from offset 0 instead of restoring its users from the changelog (slower; for comparisons)")
	f.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	f.StringVar(&o.logFormat, "log-format", "text", "text or json")
	f.BoolVar(&o.pprof, "pprof", false, "serve Go's profiler at /debug/pprof/ on --http-addr (keep --http-addr private)")
	if !embedded {
		o.security.RegisterFlags(f.FlagSet)
	}
}

// parseRun parses the flags of run (embedded false) or try; --help
// writes the usage to help.
func parseRun(args []string, embedded bool, help io.Writer) (*runOptions, error) {
	o := &runOptions{}
	synopsis := runSynopsis
	if embedded {
		synopsis = trySynopsis
	}
	f := newFlags(modeName(embedded), synopsis, help)
	defineRun(f, o, embedded)
	if err := f.parse(args); err != nil {
		return nil, err
	}
	f.Visit(func(fl *flag.Flag) { o.passwordOnCmdLine = o.passwordOnCmdLine || fl.Name == kafkasec.FlagPassword })
	return o, o.validate()
}

// validate checks every flag, one line per problem naming the flag and
// the fix.
func (o *runOptions) validate() error {
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf(format, args...)) }
	if !o.embedded && strings.TrimSpace(o.brokers) == "" {
		bad("--brokers: required: name your Kafka cluster with --brokers=kafka-1:9092,kafka-2:9092 (or %s); "+
			"to try cohortgate out on an embedded broker instead, use processor try (make run)", envName("brokers"))
	}
	for _, b := range cmdline.List(o.brokers) {
		if _, _, err := net.SplitHostPort(b); err != nil {
			bad("--brokers: %q is not host:port (e.g. --brokers=kafka-1:9092,kafka-2:9092)", b)
		}
	}
	if o.dataDir == "" {
		bad("--data-dir: must not be empty (e.g. --data-dir=/var/lib/cohortgate)")
	}
	if _, _, err := net.SplitHostPort(o.httpAddr); err != nil {
		bad("--http-addr: %q is not host:port (e.g. --http-addr=127.0.0.1:8080)", o.httpAddr)
	}
	if o.apiAddr != "" {
		if _, port, err := net.SplitHostPort(o.apiAddr); err != nil {
			bad("--api-addr: %q is not host:port (e.g. --api-addr=127.0.0.1:8081)", o.apiAddr)
		} else if o.apiAddr == o.httpAddr && port != "0" {
			bad("--api-addr: %q is also --http-addr: the membership API gets a listener of its own, apart from metrics and probes", o.apiAddr)
		}
	}
	d := topics.Defaults()
	if len(o.routes) > 0 && (o.topics.signals != string(d.Signals) || o.topics.cohort != string(d.Cohort)) {
		bad("--route: the first route replaces --signals-topic and --cohort-topic; give every route with --route and leave those two out")
	}
	if err := o.topicSet().Validate(); err != nil {
		bad("topic flags: %v", err)
	}
	if o.partitions < 1 || o.partitions > 1<<20 {
		bad("--partitions: %d must be between 1 and 1048576", o.partitions)
	}
	if o.replication == 0 || o.replication < -1 || o.replication > 1<<15-1 {
		bad("--replication-factor: %d must be -1 (broker default) or at least 1", o.replication)
	}
	durations := []struct {
		name string
		d    time.Duration
		min  time.Duration
	}{
		{"grace", o.grace, 0}, {"max-future-skew", o.maxFutureSkew, 0},
		{"align-interval", o.alignInterval, time.Millisecond}, {"commit-interval", o.commitInterval, time.Millisecond},
		{"gate-snapshot-interval", o.snapEvery, 0},
	}
	for _, d := range durations {
		if d.d < d.min {
			bad("--%s: %v must be at least %v", d.name, d.d, d.min)
		}
	}
	if o.stallTimeout < time.Second {
		bad("--stall-timeout: %v must be at least 1s", o.stallTimeout)
	}
	if o.stallHalt != 0 && o.stallHalt < o.stallTimeout {
		bad("--stall-halt: %v must be 0 (never) or at least --stall-timeout (%v)", o.stallHalt, o.stallTimeout)
	}
	if o.sessionTimeout < time.Second {
		bad("--session-timeout: %v must be at least 1s (brokers allow 6s to 30m by default)", o.sessionTimeout)
	}
	if o.restorePar < 0 {
		bad("--restore-parallel: %d must not be negative", o.restorePar)
	}
	if o.restoreMemory < 1<<20 {
		bad("--restore-memory: %d must be at least 1 MiB", o.restoreMemory)
	}
	if o.holdMaxBytes < 1<<10 {
		bad("--hold-max-bytes: %d must be at least 1024", o.holdMaxBytes)
	}
	if _, err := parseLevel(o.logLevel); err != nil {
		bad("--log-level: %v", err)
	}
	if o.logFormat != "text" && o.logFormat != "json" {
		bad("--log-format: %q must be text or json", o.logFormat)
	}
	if !o.embedded {
		if err := o.security.Validate(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func parseLevel(s string) (slog.Level, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(s)); err != nil {
		return 0, fmt.Errorf("%q is not debug, info, warn or error", s)
	}
	return l, nil
}

func newLogger(o *runOptions, w io.Writer) *slog.Logger {
	level, _ := parseLevel(o.logLevel)
	ho := &slog.HandlerOptions{Level: level}
	if o.logFormat == "json" {
		return slog.New(slog.NewJSONHandler(w, ho))
	}
	return slog.New(slog.NewTextHandler(w, ho))
}

// run is `processor run` and, embedded, `processor try`.
func run(ctx context.Context, args []string, embedded bool, stdout, stderr io.Writer) error {
	o, err := parseRun(args, embedded, stdout)
	if err != nil {
		return err
	}
	log := newLogger(o, stderr)
	for _, w := range o.security.Warnings() {
		log.Warn(w)
	}
	if o.passwordOnCmdLine {
		log.Warn("--" + kafkasec.FlagPassword + " is visible in the process list: prefer " + envName(kafkasec.FlagPassword) +
			" or --" + kafkasec.FlagPasswordFile)
	}
	if !isLoopback(o.httpAddr) && o.pprof {
		log.Warn("--pprof with --http-addr not a loopback address: the profiler is served without authentication to whoever reaches it",
			"http_addr", o.httpAddr)
	}
	if err := os.MkdirAll(o.dataDir, 0o755); err != nil {
		return fmt.Errorf("--data-dir %s: %w", o.dataDir, err)
	}

	brokers := cmdline.List(o.brokers)
	kafkaOpts, err := o.security.Opts()
	if err != nil {
		return err
	}
	if !o.embedded {
		// A wrong TLS or SASL setting would otherwise surface as EOFs
		// and retries deep inside the pipeline.
		if err := o.security.Check(ctx, brokers); err != nil {
			return err
		}
		log.Info("connected to Kafka", "brokers", strings.Join(brokers, ","), "security", o.security.String())
	} else {
		dir := filepath.Join(o.dataDir, "embedded-kafka")
		cluster, err := startEmbedded(o.embeddedAddr, dir)
		if err != nil {
			return err
		}
		defer cluster.Close()
		brokers = cluster.ListenAddrs()
		log.Info("processor try: serving an embedded Kafka-protocol broker for trying out (not for production)",
			"addr", strings.Join(brokers, ","), "log_dir", dir)
	}

	if o.unsafeNoSync || o.unsafeSkipCmds || o.unsafeLSO || o.unsafeNoWindow || o.unsafeNoIDs || o.unsafeNoTopo || o.unsafeClock != "" {
		log.Warn("UNSAFE flags set: this processor may lose state or leak signals; for chaos control runs only",
			"unsafe_no_sync", o.unsafeNoSync, "unsafe_skip_commands", o.unsafeSkipCmds,
			"unsafe_observe_lso", o.unsafeLSO, "unsafe_no_window_recovery", o.unsafeNoWindow,
			"unsafe_restore_without_identities", o.unsafeNoIDs, "unsafe_ignore_topology", o.unsafeNoTopo,
			"unsafe_clock_offset_file", o.unsafeClock)
	}
	var wall func() time.Time // the system's
	if o.unsafeClock != "" {
		wall = (&offsetClock{path: o.unsafeClock}).now
	}
	store, err := membership.Open(filepath.Join(o.dataDir, "membership"), &membership.Options{Logger: log, NoSync: o.unsafeNoSync})
	if err != nil {
		return storeOpenError(o.dataDir, err)
	}
	defer store.Close()

	txnID := o.txnID
	if txnID == "" {
		id, err := instanceID(o.dataDir)
		if err != nil {
			return err
		}
		txnID = "cohortgate-" + id
	}
	if o.exactlyOnce {
		// A refused producer ID is retried forever inside franz-go.
		if err := o.security.CheckTransactional(ctx, brokers, txnID); err != nil {
			return err
		}
	}

	reg := prometheus.NewRegistry()
	// Beside the default Go series, the scheduler's latencies (how long
	// goroutines wait runnable for a thread, go_sched_latencies_seconds):
	// on saturated cores a leave's way to the gate waits there, which no
	// step of the processor's own measures.
	reg.MustRegister(collectors.NewGoCollector(collectors.WithGoCollectorRuntimeMetrics(
		collectors.GoRuntimeMetricsRule{Matcher: regexp.MustCompile(`^/sched/latencies:seconds$`)})),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	registerBuildInfo(reg, thisBuild(), o.embedded)
	kmetrics := kprom.NewMetrics("cohortgate_kafka", kprom.Registerer(reg), kprom.Gatherer(reg), kprom.WithClientLabel())

	proc, err := fanout.New(fanout.Config{
		Brokers:           brokers,
		Group:             o.group,
		Topics:            o.topicSet(),
		CreateTopics:      o.createTopics,
		Partitions:        int32(o.partitions),
		ReplicationFactor: int16(o.replication),
		ExactlyOnce:       o.exactlyOnce,
		TransactionalID:   txnID,
		Grace:             graceOf(o.grace),
		MaxFutureSkew:     o.maxFutureSkew,
		AlignInterval:     o.alignInterval,
		CommitInterval:    o.commitInterval,
		HoldMaxBytes:      o.holdMaxBytes,
		SessionTimeout:    o.sessionTimeout,
		StallTimeout:      o.stallTimeout,
		StallHalt:         stallHaltOf(o.stallHalt),
		Testing: fanout.Testing{
			UnsafeSkipCommands:             o.unsafeSkipCmds,
			UnsafeObserveLSO:               o.unsafeLSO,
			UnsafeNoWindowRecovery:         o.unsafeNoWindow,
			UnsafeRestoreWithoutIdentities: o.unsafeNoIDs,
			UnsafeIgnoreTopology:           o.unsafeNoTopo,
			HandoverReplay:                 o.handoverReplay,
		},
		RestoreParallel: o.restorePar,
		RestoreMemory:   o.restoreMemory,
		Now:             wall,
		// Written at a clean stop, so that the next start loads the gate
		// instead of scanning the store, which takes minutes at 100M members.
		GateSnapshot:         filepath.Join(o.dataDir, "gate.snapshot"),
		GateSnapshotInterval: o.snapEvery,
		KafkaOpts:            append(kafkaOpts, kgo.WithHooks(kmetrics)),
		Logger:               log,
		Registerer:           reg,
	}, store)
	if err != nil {
		return runError(o, err)
	}

	writeTimeout := 30 * time.Second
	if o.pprof {
		writeTimeout = 2 * time.Minute // room for a default 30s CPU profile or trace
	}
	srv, err := serveHTTP("--http-addr", o.httpAddr, newOpsHandler(reg, proc, o.pprof), writeTimeout, log)
	if err != nil {
		return err
	}
	defer shutdown(ctx, srv)
	apiURL := "off (no --api-addr)"
	if o.apiAddr != "" {
		tokenFile, err := ensureToken(o.apiTokenFile, o.dataDir)
		if err != nil {
			return err
		}
		auth := &bearer{tokenFile: tokenFile, log: log, limit: newLogLimiter(time.Second)}
		api, err := serveHTTP("--api-addr", o.apiAddr, newAPIHandler(proc, auth), 30*time.Second, log)
		if err != nil {
			return err
		}
		defer shutdown(ctx, api)
		apiURL = "http://" + o.apiAddr + " (bearer token in " + tokenFile + ")"
	}

	log.Info("cohortgate processor starting", "version", thisBuild().Version, "revision", thisBuild().Revision, "brokers", strings.Join(brokers, ","), "group", o.group,
		"data_dir", o.dataDir, "http", "http://"+o.httpAddr, "api", apiURL, "exactly_once", o.exactlyOnce, "grace", o.grace.String())
	if err := proc.Run(ctx); err != nil {
		return runError(o, err)
	}
	log.Info("stopped cleanly")
	return nil
}

// instanceID returns the id kept in dataDir/instance-id, creating it: a
// transactional ID must be stable across restarts of one instance and
// distinct between instances, and each instance has its own data dir. A
// dir that is a copy of another instance's is refused (home.go).
func instanceID(dataDir string) (string, error) {
	path := filepath.Join(dataDir, "instance-id")
	b, err := os.ReadFile(path)
	if err == nil {
		if id := strings.TrimSpace(string(b)); id != "" {
			return id, checkHome(dataDir, id)
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("unable to read %s: %w", path, err)
	}
	var raw [8]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", err
	}
	id := hex.EncodeToString(raw[:])
	if err := os.WriteFile(path, []byte(id+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("unable to write %s: %w", path, err)
	}
	// A new id is a new instance: where its instance-id was made before
	// is no longer its home.
	if err := os.Remove(filepath.Join(dataDir, "instance-home")); err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", err
	}
	return id, checkHome(dataDir, id)
}

// shutdown stops srv, giving its requests 5s.
func shutdown(ctx context.Context, srv *http.Server) {
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
}

// serveHTTP serves h on addr (the value of flag) until Shutdown.
func serveHTTP(flag, addr string, h http.Handler, writeTimeout time.Duration, log *slog.Logger) (*http.Server, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", flag, addr, err)
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      writeTimeout,
		IdleTimeout:       60 * time.Second,
	}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("http server stopped", "err", err)
		}
	}()
	return srv, nil
}

// isLoopback reports whether addr (host:port) listens on loopback only.
// An empty host or 0.0.0.0 listens everywhere.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// stallHaltOf maps --stall-halt to Config.StallHalt: 0 (never) is
// NoStallHalt, since a zero Config field takes the default.
func stallHaltOf(d time.Duration) time.Duration {
	if d == 0 {
		return fanout.NoStallHalt
	}
	return d
}

// graceOf is fanout's Grace for --grace: 0 on the command line means no
// grace, where a zero Config.Grace means the default.
func graceOf(d time.Duration) time.Duration {
	if d == 0 {
		return fanout.NoGrace
	}
	return d
}
