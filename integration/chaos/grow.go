package main

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/topics"
)

// The topics grow under the load (repartition and its control): the
// commands topic, then each route's input (or the inputs first, with
// --grow-inputs-first), then the changelog, from
// --partitions to twice as many, as `kafka-topics --alter --partitions`
// does. The partition counts are part of the processor's state
// (pkg/fanout/layout.go): while the commands and the inputs disagree it
// must forward nothing (fail closed), and once they agree it takes every
// partition again under the new count, its users' commands still in
// partitions of the old one re-published to theirs before any of their
// signals is decided.
//
// The load's producers learn of each growth within a second (grows), so
// that commands go to the new partitions while the inputs have not grown
// yet; the hostile mix routes by the new count once the harness has seen
// the load's clients learn it. The oracle is told the old count: a record
// routed right under it was judged where it is, or at its re-published
// copy (integration/oracle, Config.Earlier).

// grownPartitions is the partition count the topics grow to.
func grownPartitions(o *options) int32 { return int32(2 * o.partitions) }

// repartition grows the topics under the load: the commands at a quarter
// of it; once every processor says it is not ready (fail closed, within
// notReadyWithin) and a tenth more of the load went out, each route's
// input (with --grow-inputs-first, the inputs first and then the
// commands); at 60%, the changelog. A kill -9 of one instance lands as the
// partitions are taken under the new count, right after the inputs grew,
// and another right after the changelog grew. The control
// (--unsafe-ignore-topology) does not wait for the processors to stop
// forwarding, which they do not: the leaves produced to the new commands
// partitions are read by nobody while the inputs have not grown, and
// their users' signals are forwarded. Once the inputs grew, its
// processors are restarted (they would notice the new partitions only
// with their next metadata refresh), and it ends there.
func (r *scenarioRun) repartition(ctx context.Context, control bool) error {
	o := r.h.o
	n := grownPartitions(o)
	r.grown.earlier, r.grown.changelog = []int32{int32(o.partitions)}, true
	if err := r.waitProduced(ctx, 0.25); err != nil {
		return err
	}
	first, then := r.growCommands, r.growInputs
	if o.inputsFirst && !control { // the control's damage is done while the commands alone have grown
		first, then = r.growInputs, r.growCommands
	}
	if err := first(ctx, n); err != nil {
		return err
	}
	grown := r.grownAt
	if !control {
		if err := r.waitFailClosed(ctx); err != nil {
			r.finding("%v", err)
		}
		r.known = growthHint(grown, time.Now(), o.grace)
	}
	if err := r.waitProduced(ctx, float64(r.produced.Load())/float64(o.signals)+0.1); err != nil {
		return err
	}
	if err := then(ctx, n); err != nil {
		return err
	}
	r.parts.Store(n)
	if control {
		// Without its watcher, a processor's group notices the new
		// partitions only when its metadata is refreshed (every 5
		// minutes): restarted, as after a deployment, it runs under
		// the new count. The damage is done by then.
		return r.restartAll(ctx, fmt.Sprintf("after the inputs grew to %d partitions", n))
	}
	if err := r.killOne(ctx, "as the partitions are taken under the new count"); err != nil {
		return err
	}
	if err := r.settleOrRecover(ctx, fmt.Sprintf("after the inputs grew to %d partitions", n)); err != nil {
		return err
	}
	if err := r.waitProduced(ctx, 0.6); err != nil {
		return err
	}
	if err := r.grow(ctx, n, r.set.Changelog); err != nil {
		return err
	}
	if err := r.killOne(ctx, "right after the changelog grew"); err != nil {
		return err
	}
	return r.settleOrRecover(ctx, fmt.Sprintf("after the changelog grew to %d partitions", n))
}

// growthHint says where to look when repartition finds damage: the span
// between the growth and every processor saying it is not ready, in
// which signals were decided under the old count, and a partition beyond
// the old count claimed by a second instance. Each was a leak once.
func growthHint(grown, closed time.Time, grace time.Duration) string {
	return fmt.Sprintf("where repartition found leaks before: signals stamped between the growth (%s) and every processor "+
		"not ready (%s), less the grace (%v), decided under the old count; a partition beyond the old count that a second "+
		"instance claimed (after a kill -9, a rebalance) and did not restore from the changelog (its log shows the partition "+
		"\"caught up\" with no \"users restored from the changelog\")",
		grown.Format("15:04:05.000"), closed.Format("15:04:05.000"), grace)
}

// growCommands grows the commands topic to n partitions; the hostile mix
// routes its commands by n from then on.
func (r *scenarioRun) growCommands(ctx context.Context, n int32) error {
	if err := r.grow(ctx, n, r.set.Commands); err != nil {
		return err
	}
	r.routing[0].Store(n)
	return nil
}

// growInputs grows every route's input to n partitions, one after the
// other; the hostile mix routes its signals by n once all have grown.
func (r *scenarioRun) growInputs(ctx context.Context, n int32) error {
	for _, in := range r.set.Inputs() {
		if err := r.grow(ctx, n, in); err != nil {
			return err
		}
	}
	r.routing[1].Store(n)
	return nil
}

// notReadyWithin bounds how long a processor may go on saying it is ready
// after the commands topic grew: its topology interval (2s) and a margin
// for a busy machine.
const notReadyWithin = 20 * time.Second

// waitFailClosed waits until no running processor says it is ready (the
// commands and the inputs disagree), and logs how long that took.
func (r *scenarioRun) waitFailClosed(ctx context.Context) error {
	start := time.Now()
	err := eventually(ctx, notReadyWithin, func() error {
		var ready []string
		for _, in := range r.insts {
			if !in.answering() {
				continue
			}
			code, _, err := in.get(ctx, "/readyz")
			if err != nil {
				return err
			}
			if code == http.StatusOK {
				ready = append(ready, in.name)
			}
		}
		if len(ready) > 0 {
			return fmt.Errorf("%s still ready", strings.Join(ready, ", "))
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("the commands topic grew and the inputs did not, and the processors did not stop forwarding (fail closed): %w", err)
	}
	r.logf("every processor not ready %v after the commands topic grew", time.Since(start).Round(time.Millisecond))
	return nil
}

// restartAll stops every running instance (SIGTERM) and starts it again
// over its data dir, then waits for the group to settle.
func (r *scenarioRun) restartAll(ctx context.Context, when string) error {
	r.logf("restart every processor %s (%d signals produced)", when, r.produced.Load())
	for _, in := range r.insts {
		if !in.running() {
			continue
		}
		if err := in.term(60 * time.Second); err != nil {
			r.finding("%v", err)
		}
		if err := in.start(); err != nil {
			return err
		}
	}
	return r.settleOrRecover(ctx, "after restarting every processor "+when)
}

// killOne kills a random running instance with SIGKILL and starts it
// again over its data dir, without waiting for the group to settle.
func (r *scenarioRun) killOne(ctx context.Context, when string) error {
	victim := r.pick()
	if victim == nil {
		return errors.New("no processor running to kill")
	}
	r.logf("kill -9 %s %s (%d signals produced)", victim.name, when, r.produced.Load())
	if err := victim.kill(); err != nil {
		return err
	}
	return victim.start()
}

// grow raises topic to n partitions, waits until the broker lists them,
// and until each of the load's clients that knew the topic knows them
// too (so that the hostile mix may route by n).
func (r *scenarioRun) grow(ctx context.Context, n int32, topic topics.Topic) error {
	name := string(topic)
	r.logf("grow %s to %d partitions (%d signals produced)", name, n, r.produced.Load())
	resp, err := r.h.adm.UpdatePartitions(ctx, int(n), name)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		return fmt.Errorf("growing %s to %d partitions: %w", name, n, err)
	}
	r.grownAt = time.Now()
	err = eventually(ctx, 60*time.Second, func() error {
		td, err := r.h.adm.ListTopics(ctx, name)
		if err != nil {
			return err
		}
		if d, ok := td[name]; !ok || d.Err != nil || int32(len(d.Partitions)) != n {
			return fmt.Errorf("%s: not listed with %d partitions yet", name, n)
		}
		return nil
	})
	if err != nil {
		return err
	}
	c := r.clients.Load()
	if c == nil {
		return nil // the load is over
	}
	for _, cl := range []*kgo.Client{c.Load, c.Hostile, c.Txn} {
		if cl == nil {
			continue
		}
		if _, _, err := cl.PartitionLeader(name, 0); err != nil {
			continue // a client that never wrote to the topic
		}
		cl.ForceMetadataRefresh()
		err := eventually(ctx, 30*time.Second, func() error {
			_, _, err := cl.PartitionLeader(name, n-1)
			if err != nil {
				cl.ForceMetadataRefresh()
			}
			return err
		})
		if err != nil {
			return fmt.Errorf("the load's client does not see %s's partition %d: %w", name, n-1, err)
		}
	}
	return nil
}
