package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/cohortgate/cohortgate/integration/workload"
)

// soakName is the soak's scenario: one processor under steady load, no
// chaos, sampled (see the package documentation, "Soak").
const soakName = "soak"

// soakResult is what the soak adds to a scenario's result.
type soakResult struct {
	samples  []sample
	missed   int       // scrapes that failed
	loads    []float64 // the machine's load average at each sample
	flat     []flatness
	csv, png string
	err      error // the CSV or PNG could not be written
}

// prepareSoak fixes the soak's rate and load: --rate, or half the maximum
// a probe measures; capped, when --soak-max-signals is set, so that the
// whole load stays within it. It prints which.
func (h *harness) prepareSoak(ctx context.Context) error {
	o := h.o
	rate, how := o.rate, "--rate"
	if rate == 0 {
		maxRate, err := h.probeMax(ctx)
		if err != nil {
			return fmt.Errorf("soak: measuring the maximum rate: %w", err)
		}
		rate = maxRate / 2
		how = fmt.Sprintf("half the measured maximum of %.0f signals/s", maxRate)
	}
	rate, signals, capped := soakLoad(rate, o.soakDuration, o.soakMaxSignals)
	if capped {
		how += fmt.Sprintf(", capped by --soak-max-signals %d", o.soakMaxSignals)
	}
	o.rate, o.signals = rate, signals
	if o.hostile.Scenes > 0 {
		o.hostile.Scenes = max(1, int(o.soakDuration/o.soakSceneEvery))
	}
	fmt.Fprintf(h.out, "soak: %.0f signals/s for %v (%s): %d signals over %d users, %s, sampled every %v\n",
		rate, o.soakDuration, how, o.signals, o.users, h.hostileWords(), o.soakEvery)
	return nil
}

// soakLoad is the soak's load at rate for d: its rate and signals, at
// least one, lowered to maxSignals over d if rate would make more (0: no
// cap).
func soakLoad(rate float64, d time.Duration, maxSignals int) (float64, int, bool) {
	signals := int(rate * d.Seconds())
	if maxSignals > 0 && signals > maxSignals {
		return float64(maxSignals) / d.Seconds(), maxSignals, true
	}
	return rate, max(signals, 1), false
}

// soakJudgeSpan is how long a soak of d may take beyond its load: the
// wait for the last decisions, then reading every topic back and judging
// it (the oracle reads ~1M records/s here; an hour at 240k signals/s has
// 860M in and 860M out), with room for a busy machine.
func soakJudgeSpan(d time.Duration) time.Duration {
	return 20*time.Minute + d/2
}

// probeMax measures the processor's maximum rate: a backlog of
// --soak-probe-signals on topics of its own, produced as fast as the
// broker takes them before a processor starts, and the signals its group
// commits per second from its first commit until every partition is
// committed to its end. The backlog has no commands: the producer waits
// for each command's acknowledgement, which would make a backlog of
// millions take a minute; a signal of a user absent from the gate costs
// the same lookup as any other.
func (h *harness) probeMax(ctx context.Context) (float64, error) {
	o := h.o
	ctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	sc := scenario{name: "soak-probe", instances: 1}
	prefix := "chaos-" + h.runID + "-" + sc.name
	r := &scenarioRun{h: h, sc: sc, group: prefix, dir: filepath.Join(h.root, sc.name),
		set: workload.Topics(prefix), rng: rand.New(rand.NewPCG(o.seed, nameHash(sc.name)))}
	defer func() {
		for _, in := range r.insts {
			in.shutdown()
			h.forget(in)
		}
		cctx, ccancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		_, _ = h.adm.DeleteTopics(cctx, r.topicNames()...)
		_, _ = h.adm.DeleteGroup(cctx, r.group)
		ccancel()
		_ = os.RemoveAll(r.dir)
	}()
	if err := os.MkdirAll(r.dir, 0o755); err != nil {
		return 0, err
	}
	if err := workload.CreateTopics(ctx, h.adm, r.set, int32(o.partitions), 1); err != nil {
		return 0, err
	}
	plan, err := workload.NewPlan(workload.Config{Seed: o.seed, Users: o.users, Signals: o.soakProbeSignals,
		ValueSize: o.valueSize, Partitions: o.partitions})
	if err != nil {
		return 0, err
	}
	r.logf("probe: a backlog of %d signals, then one processor", o.soakProbeSignals)
	r.produce(ctx, plan)
	select {
	case load := <-r.produceC:
		if load.err != nil {
			return 0, fmt.Errorf("producing the probe's backlog: %w", load.err)
		}
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	r.insts = append(r.insts, r.newInstance("a"))
	if err := r.insts[0].start(); err != nil {
		return 0, err
	}
	var t0 time.Time
	var c0 int64
	want := int64(o.soakProbeSignals)
	for {
		committed, end, _, _, err := r.signalsCommitted(ctx, false)
		if err != nil && !kerr.IsRetriable(err) {
			return 0, err
		}
		now := time.Now()
		if err != nil {
			// A broker just started has no group coordinator until its
			// offsets topic exists (COORDINATOR_NOT_AVAILABLE): poll
			// again, within the probe's bound.
			committed, end = 0, 0
		}
		if t0.IsZero() && committed > 0 {
			t0, c0 = now, committed
		}
		if committed >= want && end >= want {
			if now.Sub(t0) <= 0 || committed == c0 {
				return 0, errors.New("the probe's backlog was committed in one step; give more --soak-probe-signals")
			}
			maxRate := float64(committed-c0) / now.Sub(t0).Seconds()
			r.logf("probe: %d signals committed in %v after the first commit: %.0f signals/s",
				committed-c0, now.Sub(t0).Round(time.Millisecond), maxRate)
			return maxRate, nil
		}
		if err := workload.Sleep(ctx, 100*time.Millisecond); err != nil {
			return 0, fmt.Errorf("waiting for the probe's backlog (%d of %d committed): %w", committed, want, err)
		}
	}
}

// soak is the soak's act: it samples the processor every --soak-every
// until the load is produced, printing a progress line a sample and
// appending it to the CSV at once, so that a run cut short keeps its
// samples.
func (r *scenarioRun) soak(ctx context.Context) error {
	o := r.h.o
	in := r.insts[0]
	start := time.Now()
	res := &soakResult{csv: filepath.Join(o.soakOut, "soak-"+r.h.runID+".csv")}
	r.soakRes = res
	if err := os.MkdirAll(o.soakOut, 0o755); err != nil {
		return err
	}
	f, err := os.Create(res.csv)
	if err != nil {
		return err
	}
	defer f.Close()
	sw, err := newSampleWriter(f)
	if err != nil {
		return fmt.Errorf("%s: %w", res.csv, err)
	}
	for next := start; ; {
		s, err := in.scrape(ctx)
		switch {
		case err != nil:
			res.missed++
			r.logf("soak: sample missed: %v", err)
		default:
			s.at = time.Since(start)
			res.samples = append(res.samples, s)
			if err := sw.write(s); err != nil {
				return fmt.Errorf("%s: %w", res.csv, err)
			}
			load := "unknown"
			if l, ok := loadAverage(); ok {
				res.loads = append(res.loads, l)
				load = strconv.FormatFloat(l, 'f', 2, 64)
			}
			r.logf("soak %v of %v: %s; %d signals produced; load average %s", s.at.Round(time.Second), o.soakDuration, s, r.produced.Load(), load)
		}
		if !r.producing() {
			return f.Close()
		}
		next = next.Add(o.soakEvery)
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-r.produceD:
			// One last sample, at the end of the load.
		case <-time.After(time.Until(next)):
		}
	}
}

// String is a sample's progress line.
func (s sample) String() string {
	parts := make([]string, len(soakMetrics))
	for i, m := range soakMetrics {
		parts[i] = m.column + " " + m.show(s.values[i])
	}
	return strings.Join(parts, ", ")
}

// finishSoak judges the soak's samples, draws the PNG beside the CSV,
// and keeps what it found in res.
func (h *harness) finishSoak(r *scenarioRun, res *soakResult) {
	caps := map[int]float64{}
	scenes := 0
	if r.plan != nil {
		caps[metricGateMembers] = gateCap(r.plan)
		scenes = len(r.plan.Scenes)
	}
	res.flat = judgeFlat(res.samples, caps, h.o.soakWiden)
	title := fmt.Sprintf("cohortgate soak %s: %.0f signals/s for %v, %d hostile scenes, sampled every %v",
		h.runID, h.o.rate, h.o.soakDuration, scenes, h.o.soakEvery)
	res.png, res.err = drawBeside(res.csv, title, res.samples, res.flat)
}

// gateCap is the most gate members plan can make: its leavers and the
// users of its hostile scenes.
func gateCap(plan *workload.Plan) float64 {
	users := plan.Leavers()
	for _, sc := range plan.Scenes {
		users += len(sc.Users)
	}
	return float64(users)
}

// drawBeside draws the PNG of a soak beside its CSV and returns its path.
func drawBeside(csvPath, title string, samples []sample, fs []flatness) (string, error) {
	png := strings.TrimSuffix(csvPath, ".csv") + ".png"
	f, err := os.Create(png)
	if err != nil {
		return png, err
	}
	if err := drawSoak(f, title, samples, fs); err != nil {
		f.Close()
		return png, fmt.Errorf("%s: %w", png, err)
	}
	return png, f.Close()
}

// redrawSoak judges a kept CSV again and draws its PNG beside it, with no
// broker: the gate's cap comes from the load the flags describe (users,
// leave and rejoin shares, seed, partitions, and the scenes of
// --soak-duration), which must be the run's.
func redrawSoak(o *options, out io.Writer) error {
	f, err := os.Open(o.soakRedraw)
	if err != nil {
		return err
	}
	samples, err := readCSV(f)
	f.Close()
	if err != nil {
		return fmt.Errorf("%s: %w", o.soakRedraw, err)
	}
	h := o.hostile
	if h.Scenes > 0 {
		h.Scenes = max(1, int(o.soakDuration/o.soakSceneEvery))
	}
	plan, err := workload.NewPlan(workload.Config{Seed: o.seed, Users: o.users, LeavePct: o.leavePct,
		RejoinPct: o.rejoinPct, Partitions: o.partitions, Hostile: h})
	if err != nil {
		return err
	}
	fs := judgeFlat(samples, map[int]float64{metricGateMembers: gateCap(plan)}, o.soakWiden)
	name := strings.TrimSuffix(filepath.Base(o.soakRedraw), ".csv")
	var fetched float64
	if len(samples) > 0 {
		fetched = samples[len(samples)-1].signalsIn
	}
	title := fmt.Sprintf("cohortgate %s: %v, %.0f signals fetched, %d hostile scenes, sampled every %v",
		name, soakSpan(samples), fetched, len(plan.Scenes), o.soakEvery)
	png, err := drawBeside(o.soakRedraw, title, samples, fs)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "soak: %d samples over %v from %s; PNG %s\n", len(samples), soakSpan(samples), o.soakRedraw, png)
	printFlat(out, fs)
	if !allFlat(fs) {
		fmt.Fprintf(out, "soak: FAIL: not flat: %s\n", notFlat(fs))
		return errFailed
	}
	fmt.Fprintln(out, "soak: flat")
	return nil
}

// soakSpan is the time the samples cover.
func soakSpan(samples []sample) time.Duration {
	if len(samples) == 0 {
		return 0
	}
	return (samples[len(samples)-1].at - samples[0].at).Round(time.Second)
}

// leadWith plays the first scene of kind k first, moving the scenes
// before it one place later, so that its effects fall in the soak's
// warm-up. The soak judges growth over the second half of the run, and
// the poison scene's megabyte records grow the processor's buffers once,
// for good: played late in a short run (CI's three minutes), that one
// step read as growth (heap in use 35 → 65 MiB at 2m20s failed one run
// in three). Each scene keeps its Index, and so its request ids and
// seed; only the times they are played at (At) move.
func leadWith(scenes []workload.Scene, k workload.Kind) {
	i := slices.IndexFunc(scenes, func(s workload.Scene) bool { return s.Kind == k })
	if i <= 0 {
		return
	}
	at := make([]float64, len(scenes))
	for j, s := range scenes {
		at[j] = s.At
	}
	lead := scenes[i]
	copy(scenes[1:i+1], scenes[:i])
	scenes[0] = lead
	for j := range scenes {
		scenes[j].At = at[j]
	}
}
