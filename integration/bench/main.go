// Command bench is cohortgate's benchmark harness: it measures, against
// one Kafka broker, the processor's throughput, CPU and latency beside a
// plain franz-go passthrough and Kafka Streams, its restarts at scale, a
// handover and a growing group, and appends the figures to BENCHMARKS.md.
// `make bench` runs the pkg/gate micro-benchmarks and then `bench run`.
//
// Usage:
//
//	bench run [flags]          the whole harness (see run.go for the phases)
//	bench passthrough [flags]  the consume→produce baseline, run by `bench run` as its own process
//	bench scale [flags]        restart to ready at 1M to 100M members (make bench-scale)
//	bench handover [flags]     an empty owner's first forwarded signal: replay against restore (make bench-handover)
//	bench instances [flags]    1, 2 and 3 instances in one group (make bench-instances)
//
// # What a run measures
//
// One input topic pair (signals and commands, co-partitioned) is pre-loaded
// with the seeded workload of integration/loadgen. Each throughput run then
// consumes the same signals from the start, with a fresh consumer group, a
// fresh output topic and (for the processor) a fresh data directory, as a
// child process of its own:
//
//	passthrough      bench passthrough: franz-go consume→produce, at least once; the limit
//	passthrough-eos  the same in transactions (GroupTransactSession); the transactional limit
//	processor-alo    bin/processor --exactly-once=false --grace 0
//	processor-eos    bin/processor --grace 0 (exactly once, the default)
//	streams          the Kafka Streams app of integration/bench/streams (exactly_once_v2), plain KTable join
//	streams-grace    the same app with a versioned KTable and Joined.withGracePeriod(--streams-grace)
//
// The runs are repeated in --rounds interleaved rounds (round 1 does each
// run once, then round 2, ...): the machine is shared, and noise that
// falls on one moment falls on one repetition of every run rather than on
// every repetition of one. The report gives each figure as the median
// over the rounds with its min and max, and each ratio as the median of
// the ratios within a round; an aim is met only when its worst round
// meets it (rounds.go). After the load, one end-of-input tick per signals
// partition lets streams-grace drain its grace buffer (ticks.go).
//
// The harness polls, every 100 ms, the child's committed offsets on the
// signals topic (the group's OffsetFetch) and its CPU time
// (/proc/<pid>/stat utime+stime). The run starts at t0, the first poll at
// which any offset is committed, and ends at t1, the first poll at which
// the committed offsets of every partition reach the end of the signals
// topic: for the transactional runs the last output record is then
// committed with them; for the others every output record is acknowledged
// before its offsets are committed. Throughput is the signals committed
// between t0 and t1 divided by t1-t0; CPU per million signals is the
// child's CPU time between t0 and t1 over the same signals. Start-up
// (process start to t0) is reported apart. Peak RSS is the child's VmHWM.
// After the run, the output topic is read read_committed and its signals
// counted (forwarded, duplicates).
//
// Before the throughput runs, the agreement phase (agree.go) runs
// processor-eos, streams-grace and streams once each on a small seeded
// load and compares what they dropped, signal by signal and user by user,
// with each other and with what the load marks as to be dropped.
//
// Leave latency, restore and the single-partition rebuild are described in
// latency.go and restore.go.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/cohortgate/cohortgate/internal/cmdline"
)

func main() { cmdline.Main("bench", 1, dispatch) }

const usage = `usage: bench run [flags]          the benchmark harness; appends to BENCHMARKS.md
       bench passthrough [flags]  the consume→produce baseline process
       bench scale [flags]        restart to ready at 1M to 100M members (make bench-scale)
       bench handover [flags]     an empty owner's first forwarded signal: replay against restore (make bench-handover)
       bench instances [flags]    1, 2 and 3 instances in one group: rebalance to forwarding, CPU per million signals (make bench-instances)
Run "bench <command> -h" for the flags.`

func dispatch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprintln(stderr, usage)
		return flag.ErrHelp
	}
	switch args[0] {
	case "run":
		return run(ctx, args[1:], stdout, stderr)
	case "passthrough":
		return passthrough(ctx, args[1:], stdout, stderr)
	case "scale":
		return scale(ctx, args[1:], stdout, stderr)
	case "handover":
		return handover(ctx, args[1:], stdout, stderr)
	case "instances":
		return instances(ctx, args[1:], stdout, stderr)
	case "-h", "-help", "--help", "help":
		fmt.Fprintln(stderr, usage)
		return flag.ErrHelp
	}
	return fmt.Errorf("unknown command %q\n%s", args[0], usage)
}
