package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/internal/cmdline"
)

// passthroughOptions are the flags of `bench passthrough`.
type passthroughOptions struct {
	brokers        string
	group          string
	input, output  string
	commitInterval time.Duration
	maxPoll        int
	transactional  bool
	txnID          string
	httpAddr       string
}

func parsePassthrough(args []string, stderr io.Writer) (*passthroughOptions, error) {
	o := &passthroughOptions{}
	fs := flag.NewFlagSet("passthrough", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.brokers, "brokers", "127.0.0.1:9092", "comma-separated seed brokers")
	fs.StringVar(&o.group, "group", "cohortgate-passthrough", "consumer group")
	fs.StringVar(&o.input, "input", "", "topic to consume (required)")
	fs.StringVar(&o.output, "output", "", "topic to produce to (required)")
	fs.DurationVar(&o.commitInterval, "commit-interval", 100*time.Millisecond, "length of a cycle: flush and commit (or a transaction) every interval")
	fs.IntVar(&o.maxPoll, "max-poll-records", 10000, "records taken per poll, as the processor takes")
	fs.BoolVar(&o.transactional, "transactional", false, "forward in Kafka transactions (GroupTransactSession), as the exactly-once processor does")
	fs.StringVar(&o.txnID, "transactional-id", "cohortgate-passthrough", "transactional ID with --transactional")
	fs.StringVar(&o.httpAddr, "http-addr", "", "serve Go's profiler at /debug/pprof/ and cycle counts at /metrics on this address; empty: none")
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	switch {
	case fs.NArg() > 0:
		return nil, fmt.Errorf("unexpected argument %q", fs.Arg(0))
	case o.input == "" || o.output == "":
		return nil, errors.New("--input and --output are required")
	case o.commitInterval < time.Millisecond:
		return nil, errors.New("--commit-interval must be at least 1ms")
	case o.maxPoll < 1:
		return nil, errors.New("--max-poll-records must be at least 1")
	}
	return o, nil
}

// passthrough is `bench passthrough`: the broker-and-client limit the
// processor is measured against. It consumes the input in a consumer group
// and produces every record unchanged (key, value, headers, timestamp) to
// the output, partitioned by key with Kafka's default partitioner, with
// the processor's client settings (read_committed, franz-go defaults,
// records polled per cycle), and no gate, no Pebble, no commands.
//
// A cycle lasts --commit-interval. Without --transactional it ends with a
// flush and an offset commit (at least once, like the processor with
// --exactly-once=false); with it, a cycle is a transaction of a
// GroupTransactSession that commits the offsets with the output (like the
// processor's default).
func passthrough(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	o, err := parsePassthrough(args, stderr)
	if err != nil {
		return err
	}
	var st cycleStats
	if o.httpAddr != "" {
		stopHTTP, err := serveDebug(o.httpAddr, &st)
		if err != nil {
			return err
		}
		defer stopHTTP()
	}
	opts := []kgo.Opt{
		kgo.SeedBrokers(cmdline.List(o.brokers)...),
		kgo.ClientID("cohortgate-passthrough"),
		kgo.ConsumerGroup(o.group),
		kgo.ConsumeTopics(o.input),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.BlockRebalanceOnPoll(),
		kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil)),
	}
	var f forwarder
	if o.transactional {
		s, err := kgo.NewGroupTransactSession(append(opts, kgo.TransactionalID(o.txnID))...)
		if err != nil {
			return err
		}
		defer s.Close()
		f = &txnForwarder{s: s}
	} else {
		cl, err := kgo.NewClient(append(opts, kgo.DisableAutoCommit())...)
		if err != nil {
			return err
		}
		defer cl.Close()
		f = &plainForwarder{cl: cl}
	}
	n, err := forward(ctx, f, o, &st)
	fmt.Fprintf(stdout, "passthrough: forwarded %d records\n", n)
	return err
}

// forwarder is one way of ending a cycle; the two mirror the processor's
// two sessions.
type forwarder interface {
	client() *kgo.Client
	begin() error
	produce(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error))
	end(ctx context.Context) error
}

// cycleStats counts the cycles ended and the time spent ending them
// (flush, commit), served at /metrics for the harness.
type cycleStats struct {
	cycles atomic.Int64
	endNs  atomic.Int64
}

// forward runs cycles until ctx ends, then ends the last one with a
// commit. It returns the records forwarded.
func forward(ctx context.Context, f forwarder, o *passthroughOptions, st *cycleStats) (int64, error) {
	var produced, failed atomic.Int64
	promise := func(_ *kgo.Record, err error) {
		if err != nil {
			failed.Add(1)
			return
		}
		produced.Add(1)
	}
	work := context.WithoutCancel(ctx)
	for {
		if err := f.begin(); err != nil {
			return produced.Load(), err
		}
		deadline := time.Now().Add(o.commitInterval)
		for ctx.Err() == nil && time.Now().Before(deadline) {
			pollCtx, cancel := context.WithDeadline(ctx, deadline)
			fs := f.client().PollRecords(pollCtx, o.maxPoll)
			cancel()
			if fs.IsClientClosed() {
				return produced.Load(), errors.New("client closed")
			}
			fs.EachRecord(func(r *kgo.Record) {
				f.produce(work, &kgo.Record{
					Topic:     o.output,
					Key:       r.Key,
					Value:     r.Value,
					Headers:   r.Headers,
					Timestamp: r.Timestamp,
				}, promise)
			})
		}
		ending := time.Now()
		if err := f.end(work); err != nil {
			return produced.Load(), err
		}
		st.endNs.Add(int64(time.Since(ending)))
		st.cycles.Add(1)
		if n := failed.Load(); n > 0 {
			return produced.Load(), fmt.Errorf("%d produces failed", n)
		}
		f.client().AllowRebalance()
		if ctx.Err() != nil {
			return produced.Load(), nil
		}
	}
}

// plainForwarder flushes, then commits what was polled: at least once.
type plainForwarder struct{ cl *kgo.Client }

func (p *plainForwarder) client() *kgo.Client { return p.cl }
func (p *plainForwarder) begin() error        { return nil }
func (p *plainForwarder) produce(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	p.cl.Produce(ctx, r, promise)
}

func (p *plainForwarder) end(ctx context.Context) error {
	if err := p.cl.Flush(ctx); err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	if err := p.cl.CommitUncommittedOffsets(ctx); err != nil {
		return fmt.Errorf("commit: %w", err)
	}
	return nil
}

// txnForwarder ends each cycle as a transaction, flushing first as the
// processor does.
type txnForwarder struct{ s *kgo.GroupTransactSession }

func (t *txnForwarder) client() *kgo.Client { return t.s.Client() }
func (t *txnForwarder) begin() error        { return t.s.Begin() }
func (t *txnForwarder) produce(ctx context.Context, r *kgo.Record, promise func(*kgo.Record, error)) {
	t.s.Produce(ctx, r, promise)
}

func (t *txnForwarder) end(ctx context.Context) error {
	if err := t.s.Client().Flush(ctx); err != nil {
		return fmt.Errorf("flush: %w", err)
	}
	if _, err := t.s.End(ctx, kgo.TryCommit); err != nil {
		return fmt.Errorf("end transaction: %w", err)
	}
	return nil
}

// Names of the series the passthrough serves at /metrics.
const (
	metricPassthroughCycles     = "bench_passthrough_cycles_total"
	metricPassthroughEndSeconds = "bench_passthrough_end_seconds_total"
)

// serveDebug serves net/http/pprof and st (Prometheus text format, at
// /metrics) on addr until the returned stop is called.
func serveDebug(addr string, st *cycleStats) (stop func(), err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /metrics", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "%s %d\n%s %g\n", metricPassthroughCycles, st.cycles.Load(),
			metricPassthroughEndSeconds, float64(st.endNs.Load())/1e9)
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, WriteTimeout: 2 * time.Minute}
	go func() { _ = srv.Serve(ln) }()
	return func() { _ = srv.Close() }, nil
}
