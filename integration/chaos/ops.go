package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/integration/oracle"
	"github.com/cohortgate/cohortgate/integration/workload"
)

// ops: what an operator, NTP or the cluster changes under running
// processors, while the load is produced (README, "Clocks"; docs/operations.md,
// "A topic's limit changed while running" and "Other topics deleted and
// created again"):
//
//  1. every processor's wall clock jumps a minute ahead for half a second
//     and is stepped back (observations must not be stamped in the future);
//  2. it steps back by the future skew plus 2 s, for 5 s (held signals
//     must wait, not go to the DLQ);
//  3. the changelog's max.message.bytes is lowered and the cohort topic's
//     raised, then both put back (limits must follow the topics);
//  4. the cohort topic is deleted and created again: the processors are
//     paused (SIGSTOP) while the harness reads what the topic committed
//     (what its readers had seen) and recreates it, then continued; the
//     oracle judges those records with the new topic's (oracle.Options
//     Deleted).
//
// The processors' clocks are stepped through --unsafe-clock-offset-file:
// a process cannot have a clock of its own otherwise. The load's hostile
// mix leaves out two kinds whose verdict a step changes by design: a
// signal stamped past the future skew (after a forward step S4 accepts
// event times up to the step further ahead for a while; README, Clocks)
// and oversize records (a limit changed while they are in flight decides
// them by the limit they met).
func (r *scenarioRun) ops(ctx context.Context) error {
	skew := r.h.o.maxFutureSkew
	steps := []struct {
		at       float64 // of the load produced
		offset   time.Duration
		lasts    time.Duration
		describe string
	}{
		{0.1, time.Minute, 500 * time.Millisecond, "a minute ahead for half a second"},
		{0.25, -(skew + 2*time.Second), 5 * time.Second, "back by the future skew plus 2s, for 5s"},
	}
	for _, st := range steps {
		if err := r.waitProduced(ctx, st.at); err != nil {
			return err
		}
		r.logf("step every processor's clock %s", st.describe)
		if err := r.stepClock(st.offset); err != nil {
			return err
		}
		// The step's length is the scenario's, not a wait for the
		// processors.
		if err := workload.Sleep(ctx, st.lasts); err != nil {
			return err
		}
		if err := r.stepClock(0); err != nil {
			return err
		}
	}

	if err := r.waitProduced(ctx, 0.4); err != nil {
		return err
	}
	const lowered, raised = "16384", "3145728"
	r.logf("lower %s's max.message.bytes to %s, raise %s's to %s", r.set.Changelog, lowered, r.set.Cohort, raised)
	if err := r.setLimit(ctx, string(r.set.Changelog), lowered); err != nil {
		return err
	}
	if err := r.setLimit(ctx, string(r.set.Cohort), raised); err != nil {
		return err
	}
	if err := workload.Sleep(ctx, 5*time.Second); err != nil {
		return err
	}
	r.logf("put both limits back")
	for _, t := range []string{string(r.set.Changelog), string(r.set.Cohort)} {
		if err := r.setLimit(ctx, t, ""); err != nil {
			return err
		}
	}

	if err := r.waitProduced(ctx, 0.6); err != nil {
		return err
	}
	return r.recreateOutput(ctx)
}

// clockFile is the file the processors of a stepping scenario read their
// clock's offset from.
func (r *scenarioRun) clockFile() string { return filepath.Join(r.dir, "clock-offset") }

// stepClock sets every processor's wall clock to the true time plus d,
// by replacing the file they read (a rename: no processor reads half).
func (r *scenarioRun) stepClock(d time.Duration) error {
	tmp := r.clockFile() + ".tmp"
	if err := os.WriteFile(tmp, []byte(d.String()+"\n"), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, r.clockFile())
}

// setLimit sets topic's max.message.bytes to value, or back to the
// broker's default when value is empty.
func (r *scenarioRun) setLimit(ctx context.Context, topic, value string) error {
	ac := kadm.AlterConfig{Op: kadm.DeleteConfig, Name: "max.message.bytes"}
	if value != "" {
		ac = kadm.AlterConfig{Op: kadm.SetConfig, Name: "max.message.bytes", Value: &value}
	}
	resps, err := r.h.adm.AlterTopicConfigs(ctx, []kadm.AlterConfig{ac}, topic)
	if err == nil {
		_, err = resps.On(topic, nil)
	}
	if err == nil {
		for _, resp := range resps {
			err = errors.Join(err, resp.Err)
		}
	}
	if err != nil {
		return fmt.Errorf("setting %s's max.message.bytes to %q: %w", topic, value, err)
	}
	return nil
}

// recreateOutput deletes the cohort topic and creates it again under the
// running processors, keeping what it had committed for the oracle.
func (r *scenarioRun) recreateOutput(ctx context.Context) error {
	cohort := string(r.set.Cohort)
	var paused []*instance
	for _, in := range r.insts {
		if in.answering() {
			if _, err := in.signal(syscall.SIGSTOP, false); err != nil {
				return err
			}
			paused = append(paused, in)
		}
	}
	defer func() {
		for _, in := range paused {
			if _, err := in.signal(syscall.SIGCONT, false); err != nil {
				r.finding("%v", err)
			}
		}
	}()
	// Paused, the processors may hold transactions open on the topic:
	// what they hold is not committed, will be aborted, and is produced
	// again to the new topic. The last stable offsets bound what is.
	listed, err := r.h.adm.ListCommittedOffsets(ctx, cohort)
	if err != nil {
		return err
	}
	ends := make(map[int32]int64)
	var lerr error
	listed.Each(func(o kadm.ListedOffset) {
		lerr = errors.Join(lerr, o.Err)
		ends[o.Partition] = o.Offset
	})
	if lerr != nil {
		return fmt.Errorf("listing %s's last stable offsets: %w", cohort, lerr)
	}
	var kept []oracle.Record
	err = oracle.ReadTopic(ctx, []kgo.Opt{kgo.SeedBrokers(r.h.brokers...)}, cohort, ends, func(rec *kgo.Record) {
		kept = append(kept, oracle.RecordOf(rec))
	})
	if err != nil {
		return fmt.Errorf("reading %s before deleting it: %w", cohort, err)
	}
	r.deleted = map[string][]oracle.Record{cohort: kept}
	r.logf("%s: %d committed records read, up to %v; deleting it and creating it again under %d paused processors",
		cohort, len(kept), ends, len(paused))
	id, err := r.recreateTopic(ctx, r.set.Cohort)
	if err != nil {
		return err
	}
	r.logf("%s created again: topic ID %v; continuing the processors", cohort, id)
	return nil
}

// opsMix is the ops scenario's hostile mix: every kind but the two whose
// verdict a step of the clock or of a limit changes (see ops).
func opsMix(h workload.Hostile) workload.Hostile {
	shares := make(workload.Shares)
	for _, k := range workload.Kinds() {
		if k != workload.KindFuture && k != workload.KindPoison {
			shares[k] = 1
		}
	}
	h.Shares = shares
	if h.Scenes == 0 {
		h.Scenes = 12
	}
	return h
}

// offsetFlag is the processor flag a stepping scenario adds.
func (r *scenarioRun) offsetFlag() []string {
	return []string{"--unsafe-clock-offset-file", r.clockFile()}
}
