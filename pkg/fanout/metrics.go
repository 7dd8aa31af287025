package fanout

import (
	"math"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
)

// metrics are the processor's own Prometheus series. Labels never carry a
// user id: cardinality stays bounded by partitions, reasons and outcomes.
// Most are kept by an event listener (listener); the per-signal counters
// and histograms, on the hot path, are kept by the signals loop directly.
type metrics struct {
	signalsIn      *prometheus.CounterVec // route
	forwarded      *prometheus.CounterVec // route
	dropped        *prometheus.CounterVec // route, reason
	dlq            *prometheus.CounterVec // source, reason
	commands       *prometheus.CounterVec // op, result
	misrouted      *prometheus.CounterVec // source
	lateLeaves     prometheus.Counter
	topology       prometheus.Counter
	txns           *prometheus.CounterVec // outcome
	produceErrors  prometheus.Counter
	forwardLatency prometheus.Histogram
	holdSeconds    prometheus.Histogram
	restoreSeconds prometheus.Gauge
	lag            *prometheus.GaugeVec // route, partition
	batchSteps     *prometheus.HistogramVec
	fetchDelay     prometheus.Histogram
	stalls         *prometheus.CounterVec // cause
}

// The route label of a series is the route's input topic: bounded by the
// configuration, like the partitions.

// routeSeries are one route's per-signal series, looked up once: the
// signals loop touches them for every signal.
type routeSeries struct {
	in, forwarded, droppedLeft prometheus.Counter
}

// routes returns the per-signal series of each route, by route index
// (the order of topics.Set.AllRoutes), creating them so that dashboards
// show zero, not absence.
func (m *metrics) routes(inputs []string) []routeSeries {
	out := make([]routeSeries, len(inputs))
	for i, in := range inputs {
		out[i] = routeSeries{
			in:          m.signalsIn.WithLabelValues(in),
			forwarded:   m.forwarded.WithLabelValues(in),
			droppedLeft: m.dropped.WithLabelValues(in, dropLeft),
		}
	}
	return out
}

// Metric names, exported for dashboards, alerts and tests.
const (
	MetricSignalsIn         = "cohortgate_signals_in_total"
	MetricForwarded         = "cohortgate_signals_forwarded_total"
	MetricDropped           = "cohortgate_signals_dropped_total"
	MetricDLQ               = "cohortgate_dlq_records_total"
	MetricCommands          = "cohortgate_commands_applied_total"
	MetricMisrouted         = "cohortgate_misrouted_records_total"
	MetricLateLeaves        = "cohortgate_late_leaves_total"
	MetricTopologyChanges   = "cohortgate_topology_changes_total"
	MetricTransactions      = "cohortgate_transactions_total"
	MetricProduceErrors     = "cohortgate_produce_errors_total"
	MetricForwardLatency    = "cohortgate_forward_latency_seconds"
	MetricHoldSeconds       = "cohortgate_hold_seconds"
	MetricRestoreSeconds    = "cohortgate_restore_duration_seconds"
	MetricConsumerLag       = "cohortgate_consumer_lag_records"
	MetricOpenTransaction   = "cohortgate_commands_open_transaction_seconds"
	MetricGateMembers       = "cohortgate_gate_members"
	MetricGateBytes         = "cohortgate_gate_memory_bytes"
	MetricHeldSignals       = "cohortgate_held_signals"
	MetricHeldBytes         = "cohortgate_held_bytes"
	MetricPartitionsOwned   = "cohortgate_partitions_owned"
	MetricPartitionsRestore = "cohortgate_partitions_restoring"
	MetricOutboxPending     = "cohortgate_outbox_pending"
	MetricReady             = "cohortgate_ready"
	MetricBatchStep         = "cohortgate_commands_batch_step_seconds"
	MetricFetchDelay        = "cohortgate_command_fetch_delay_seconds"
	MetricStalls            = "cohortgate_stalls_total"
	MetricStalledSeconds    = "cohortgate_stalled_seconds"
)

// gauges are values the processor already tracks, exposed as GaugeFuncs so
// that nothing has to remember to set them.
type gauges struct {
	gateMembers, gateBytes   func() float64
	heldSignals, heldBytes   func() float64
	owned, restoring, outbox func() float64
	ready                    func() float64
	stalled                  func() float64
	openTxns                 func() map[int32]float64 // per owned partition
}

// partitionGauges is a gauge per owned partition, read at scrape time, so
// that a partition's series goes with the partition.
type partitionGauges struct {
	desc   *prometheus.Desc
	values func() map[int32]float64
}

func (g partitionGauges) Describe(ch chan<- *prometheus.Desc) { ch <- g.desc }

func (g partitionGauges) Collect(ch chan<- prometheus.Metric) {
	if g.values == nil {
		return
	}
	for p, v := range g.values() {
		ch <- prometheus.MustNewConstMetric(g.desc, prometheus.GaugeValue, v, strconv.Itoa(int(p)))
	}
}

func newMetrics(reg prometheus.Registerer, g gauges) (*metrics, error) {
	latencyBuckets := prometheus.ExponentialBuckets(0.0005, 2, 16) // 0.5ms .. ~16s
	m := &metrics{
		signalsIn: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricSignalsIn, Help: "Signals fetched, by route (its input topic).",
		}, []string{"route"}),
		forwarded: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricForwarded, Help: "Signals forwarded to their route's output (acknowledged; in a committed transaction when exactly-once), by route (its input topic).",
		}, []string{"route"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricDropped, Help: "Signals not forwarded because the user had left at the signal's event time, by route (its input topic).",
		}, []string{"route", "reason"}),
		dlq: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricDLQ, Help: "Records written to the dead-letter topic, by source topic role and reason.",
		}, []string{"source", "reason"}),
		commands: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricCommands, Help: "Membership commands applied, by op and whether they changed state.",
		}, []string{"op", "result"}),
		misrouted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricMisrouted, Help: "Records found in a partition other than their key's murmur2 partition and re-published there.",
		}, []string{"source"}), // signals or commands, never the topic: its name is configuration
		lateLeaves: prometheus.NewCounter(prometheus.CounterOpts{
			Name: MetricLateLeaves, Help: "Leaves whose boundary lay before signals of their partition already allowed (arrived beyond the grace).",
		}),
		topology: prometheus.NewCounter(prometheus.CounterOpts{
			Name: MetricTopologyChanges, Help: "Changes of the topics' layout (a partition count, a topic ID) found at start or while running; each stopped every partition and took them again under the new layout.",
		}),
		txns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricTransactions, Help: "Processing cycles ended, by outcome (commit, abort, unknown).",
		}, []string{"outcome"}),
		produceErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: MetricProduceErrors, Help: "Produce requests that failed; the cycle they belong to is aborted or rewound.",
		}),
		forwardLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: MetricForwardLatency, Help: "Time from a forwarded signal's timestamp (kept by its copy) to the copy being acknowledged: end to end, alignment hold included. Observed for one forwarded signal in 8.",
			Buckets: latencyBuckets,
		}),
		holdSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: MetricHoldSeconds, Help: "Time a signal waited between fetch and decision (alignment with the commands topic, restore). Observed for one signal in 8 (by input offset).",
			Buckets: latencyBuckets,
		}),
		restoreSeconds: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: MetricRestoreSeconds, Help: "Seconds the last start-up rebuild of the gate from the local store took.",
		}),
		lag: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: MetricConsumerLag, Help: "Records between an input's high watermark and the last fetched offset, per route (its input topic) and owned partition.",
		}, []string{"route", "partition"}),
		batchSteps: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: MetricBatchStep, Help: "Time each step of a commands batch took: wait (for a fetch), recover (late-leave windows of new claims), apply (to the store batch), gate (the gate closed or opened), settle (receipts and changelog records), commit (the store's write, visible), then, off the applier's path, sync (the write-ahead log's sync, after which the batch's records are queued and its offsets release held signals). A leave is in force once gate ends.",
			Buckets: stepBuckets,
		}, []string{"step"}),
		fetchDelay: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: MetricFetchDelay, Help: "Time from a command's record timestamp (its producer's clock) to the commands side receiving it from a poll; 0 when the timestamp is ahead.",
			Buckets: stepBuckets,
		}),
		stalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: MetricStalls, Help: "Stalls: the signals side made no progress for --stall-timeout (cycles carrying records aborted, an owned partition's fetches failed or its signals were not decided, no cycle ended); not ready while one lasts. By cause.",
		}, []string{"cause"}),
	}
	cs := []prometheus.Collector{
		m.signalsIn, m.forwarded, m.dropped, m.dlq, m.commands, m.misrouted,
		m.lateLeaves, m.topology, m.txns, m.produceErrors, m.forwardLatency, m.holdSeconds,
		m.restoreSeconds, m.lag, m.batchSteps, m.fetchDelay, m.stalls,
		partitionGauges{desc: prometheus.NewDesc(MetricOpenTransaction,
			"Seconds an owned commands partition has been held by a transaction left open on it (0 when it is not); its signals wait meanwhile.",
			[]string{"partition"}, nil), values: g.openTxns},
		gaugeFunc(MetricGateMembers, "Users with an entry in the in-memory gate (users who ever left).", g.gateMembers),
		gaugeFunc(MetricGateBytes, "Approximate bytes held by the in-memory gate.", g.gateBytes),
		gaugeFunc(MetricHeldSignals, "Signals fetched and waiting for a decision.", g.heldSignals),
		gaugeFunc(MetricHeldBytes, "Bytes of signals fetched and waiting for a decision.", g.heldBytes),
		gaugeFunc(MetricPartitionsOwned, "Partitions this instance owns.", g.owned),
		gaugeFunc(MetricPartitionsRestore, "Owned partitions whose membership state is still catching up; their signals wait.", g.restoring),
		gaugeFunc(MetricOutboxPending, "Changelog, DLQ and re-published command records durably queued for the next transaction.", g.outbox),
		gaugeFunc(MetricReady, "1 once state is restored and every owned partition caught up, and no stall lasts, else 0.", g.ready),
		gaugeFunc(MetricStalledSeconds, "Seconds the stall in force has lasted (since its first failure), 0 when none.", g.stalled),
	}
	for _, c := range cs {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	// Pre-create the common series so dashboards show zero, not absence
	// (the routes' own: routes).
	m.txns.WithLabelValues(outcomeCommit)
	m.txns.WithLabelValues(outcomeAbort)
	for _, s := range stepNames {
		m.batchSteps.WithLabelValues(s)
	}
	for _, c := range []StallCause{StallAborts, StallFetch, StallHeld, StallCycle} {
		m.stalls.WithLabelValues(string(c))
	}
	return m, nil
}

// stepBuckets resolve the milliseconds of a commands batch: 0.1 ms to
// about 18 s by factors of √2.
var stepBuckets = prometheus.ExponentialBuckets(0.0001, math.Sqrt2, 36)

// batchStep is one step of a commands batch (applier.applyFetched).
type batchStep int

const (
	stepWait batchStep = iota
	stepRecover
	stepApply
	stepGate
	stepSettle
	stepCommit
	stepSync
	numSteps
)

// stepNames are the step label values, by batchStep.
var stepNames = [numSteps]string{"wait", "recover", "apply", "gate", "settle", "commit", "sync"}

// stepTimer times the steps of the commands batches: lap observes the time
// since the previous lap (or start) as step s. The zero stepTimer times
// nothing, as in tests.
type stepTimer struct {
	steps [numSteps]prometheus.Observer
	delay prometheus.Observer
	last  time.Time
}

// stepTimer returns the timer of the commands side's batches.
func (m *metrics) stepTimer() stepTimer {
	t := stepTimer{delay: m.fetchDelay}
	for i, s := range stepNames {
		t.steps[i] = m.batchSteps.WithLabelValues(s)
	}
	return t
}

func (t *stepTimer) start() {
	if t.delay != nil {
		t.last = time.Now()
	}
}

func (t *stepTimer) lap(s batchStep) {
	if t.delay == nil {
		return
	}
	now := time.Now()
	t.steps[s].Observe(now.Sub(t.last).Seconds())
	t.last = now
}

// observe observes d as step s: for the steps another goroutine times
// (the sync, which the syncer waits for while the applier goes on).
func (t *stepTimer) observe(s batchStep, d time.Duration) {
	if t.delay != nil {
		t.steps[s].Observe(d.Seconds())
	}
}

// fetched observes, for every record of a poll, the time from its
// timestamp to the end of the poll (the last lap).
func (t *stepTimer) fetched(fps []kgo.FetchTopicPartition) {
	if t.delay == nil {
		return
	}
	for _, fp := range fps {
		for _, r := range fp.Records {
			if !r.Attrs.IsControl() {
				t.delay.Observe(max(t.last.Sub(r.Timestamp), 0).Seconds())
			}
		}
	}
}

func gaugeFunc(name, help string, fn func() float64) prometheus.GaugeFunc {
	if fn == nil {
		fn = func() float64 { return 0 }
	}
	return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: name, Help: help}, fn)
}

// Label values.
const (
	dropLeft      = "left"
	outcomeCommit = "commit"
	outcomeAbort  = "abort"
	outcomeUnsure = "unknown"
)

// listener is the event listener that keeps the series events carry.
func (m *metrics) listener() EventListener {
	return EventListener{
		CommandApplied:  func(i CommandInfo) { m.commands.WithLabelValues(i.Op.String(), i.Result).Inc() },
		LateLeave:       func(LateLeaveInfo) { m.lateLeaves.Inc() },
		TopologyChanged: func(TopologyChangedInfo) { m.topology.Inc() },
		Misrouted:       func(i MisroutedInfo) { m.misrouted.WithLabelValues(i.Source).Inc() },
		DeadLetter:      func(i DeadLetterInfo) { m.dlq.WithLabelValues(i.Source, string(i.Reason)).Inc() },
		ProduceFailed:   func(ProduceFailedInfo) { m.produceErrors.Inc() },
		CycleEnd: func(i CycleInfo) {
			switch i.Outcome {
			case Committed:
				m.txns.WithLabelValues(outcomeCommit).Inc()
			case Aborted, OutputOnly:
				m.txns.WithLabelValues(outcomeAbort).Inc()
			default:
				m.txns.WithLabelValues(outcomeUnsure).Inc()
			}
		},
		Restored: func(i RestoredInfo) { m.restoreSeconds.Set(i.Took.Seconds()) },
		Stall: func(i StallInfo) {
			if !i.Ended {
				m.stalls.WithLabelValues(string(i.Cause)).Inc()
			}
		},
	}
}
