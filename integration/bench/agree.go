package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/integration/oracle"
	"github.com/cohortgate/cohortgate/integration/workload"
	"github.com/cohortgate/cohortgate/topics"
)

// The agreement phase checks, on a small seeded load, that the Kafka
// Streams variants drop the same signals as the processor. Its load
// (--agree-*) has more leavers than the throughput load so that every
// rule is exercised often. Each of processor-eos (with --agree-grace),
// streams-grace and streams reads it once; their outputs are then
// compared signal by signal and user by user with each other and with
// what the load itself says is to be dropped: the signals that the load
// generator marked gated (oracle.ExpectGated: produced after Kafka
// acknowledged the user's leave, stamped at or after its boundary).

// agreeRun is what one run of the agreement phase forwarded, next to the
// processor's and to the load's expectation.
type agreeRun struct {
	Name      string
	Err       string
	Forwarded int64 // distinct signals of the load in the output
	Dropped   int64 // signals of the load not in the output

	// Against the expectation: gated signals forwarded (leaked) and
	// ungated ones dropped (lost).
	Leaked, Lost int64
	// Against processor-eos: signals this run forwarded and the processor
	// did not (Extra) and the other way (Missing); of those, SameMs fall in
	// the millisecond of one of their user's commands. UsersDiffer is how
	// many users' forwarded counts differ from the processor's.
	Extra, Missing, SameMs int64
	UsersDiffer            int
}

// agreeResult is the agreement phase.
type agreeResult struct {
	Load  loadResult
	Gated int64 // signals the load marks to be dropped
	Runs  []agreeRun
	Err   string
}

// loadSignal is what the agreement phase knows of one signal of its load.
type loadSignal struct {
	user  uint64
	ms    int64 // record timestamp, ms
	gated bool
}

func (h *harness) agreementPhase(ctx context.Context) {
	res := &agreeResult{}
	h.res.Agreement = res
	fail := func(err error) {
		res.Err = err.Error()
		h.res.errorf("agreement: %v", err)
	}
	in, load, err := h.preload(ctx, "agree.", h.o.agree)
	res.Load = load
	if err != nil {
		fail(err)
		return
	}
	h.in = in
	signals, err := h.readLoadSignals(ctx, in)
	if err != nil {
		fail(err)
		return
	}
	commandMs, err := h.readCommandMillis(ctx, in)
	if err != nil {
		fail(err)
		return
	}
	for _, s := range signals {
		if s.gated {
			res.Gated++
		}
	}

	type output struct {
		name string
		seen bitset
	}
	var outs []output
	runs := []struct {
		name  string
		start func(instance, out string) (spawned, error)
	}{
		{runProcessorEOS, h.startProcessor(true, h.o.agreeGrace)},
		{runStreamsGrace, h.startStreams(h.o.streamsGrace)},
		{runStreams, h.startStreams(0)},
	}
	for _, r := range runs {
		if ctx.Err() != nil {
			return
		}
		t := h.throughput(ctx, r.name, 0, r.start) // round 0: the instance is <run>.r0
		if t.Err != "" {
			res.Runs = append(res.Runs, agreeRun{Name: r.name, Err: t.Err})
			fail(fmt.Errorf("%s: %s", r.name, t.Err))
			continue
		}
		outs = append(outs, output{r.name, t.Out.seen})
	}
	if len(outs) == 0 || outs[0].name != runProcessorEOS {
		fail(errors.New("no processor output to compare with"))
		return
	}
	proc := outs[0].seen
	perUser := func(seen bitset) map[uint64]int64 {
		m := make(map[uint64]int64)
		for id, s := range signals {
			if seen.has(uint64(id)) {
				m[s.user]++
			}
		}
		return m
	}
	procUsers := perUser(proc)
	for _, o := range outs {
		a := agreeRun{Name: o.name}
		for id, s := range signals {
			got, want, p := o.seen.has(uint64(id)), !s.gated, proc.has(uint64(id))
			if got {
				a.Forwarded++
			} else {
				a.Dropped++
			}
			switch {
			case got && !want:
				a.Leaked++
			case !got && want:
				a.Lost++
			}
			if got != p {
				if got {
					a.Extra++
				} else {
					a.Missing++
				}
				if commandMs[s.user][s.ms] {
					a.SameMs++
				}
			}
		}
		users := perUser(o.seen)
		for u := range signalUsers(signals) {
			if users[u] != procUsers[u] {
				a.UsersDiffer++
			}
		}
		res.Runs = append(res.Runs, a)
		h.printf("agreement: %s forwarded %d, dropped %d (load: %d gated); leaked %d, lost %d; against processor-eos: +%d −%d (%d in a command's millisecond), %d users differ",
			a.Name, a.Forwarded, a.Dropped, res.Gated, a.Leaked, a.Lost, a.Extra, a.Missing, a.SameMs, a.UsersDiffer)
	}
}

func signalUsers(signals []loadSignal) map[uint64]bool {
	m := make(map[uint64]bool)
	for _, s := range signals {
		m[s.user] = true
	}
	return m
}

// readLoadSignals reads the signals topic of in: for each signal id of the
// load, its user, timestamp and whether the load marks it gated.
func (h *harness) readLoadSignals(ctx context.Context, in inputs) ([]loadSignal, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	out := make([]loadSignal, in.ids)
	var bad error
	err := oracle.ReadTopic(ctx, readerOpts(h.o.brokers), in.signals, in.signalsEnd, func(r *kgo.Record) {
		id, err := workload.ParseSignalID(r.Value)
		if err != nil || id >= uint64(in.ids) {
			return // an end-of-input tick
		}
		user, err := topics.ParseUserID(r.Key)
		if err != nil {
			bad = fmt.Errorf("signal %d: %w", id, err)
			return
		}
		s := loadSignal{user: user, ms: r.Timestamp.UnixMilli()}
		for _, hd := range r.Headers {
			if hd.Key == oracle.HeaderExpect && string(hd.Value) == oracle.ExpectGated {
				s.gated = true
			}
		}
		out[id] = s
	})
	if err == nil {
		err = bad
	}
	return out, err
}

// readCommandMillis reads the commands topic of in: for each user, the
// milliseconds of its commands' boundaries (at_ns, or the record timestamp
// where a command has none).
func (h *harness) readCommandMillis(ctx context.Context, in inputs) (map[uint64]map[int64]bool, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	end, err := h.a.endOffsets(ctx, in.commands)
	if err != nil {
		return nil, err
	}
	out := make(map[uint64]map[int64]bool)
	err = oracle.ReadTopic(ctx, readerOpts(h.o.brokers), in.commands, end, func(r *kgo.Record) {
		c, err := topics.DecodeCommand(r.Key, r.Value)
		if err != nil {
			return
		}
		ms := r.Timestamp.UnixMilli()
		if c.HasAt {
			ms = int64(c.AtNs / 1e6)
		}
		if out[c.UserID] == nil {
			out[c.UserID] = make(map[int64]bool)
		}
		out[c.UserID][ms] = true
	})
	return out, err
}
