package main

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cohortgate/cohortgate/integration/workload"
	"github.com/cohortgate/cohortgate/topics"
)

// reroute is a rolling deploy that changes the routes, under load: a
// third of the way in, b is stopped and started again with one route
// more, as a StatefulSet's rolling update would. Its group runs with the
// old routes (a), so Kafka must refuse it: b exits on its own, saying the
// routes differ, while a takes every partition and goes on forwarding.
// Two thirds in, the deploy is rolled back: b starts with the old routes
// and the group settles. The oracle then judges the whole run: a stall
// shows as a settle failure, a leak or a loss in its counts.
func (r *scenarioRun) reroute(ctx context.Context) error {
	if err := r.waitProduced(ctx, 1.0/3); err != nil {
		return err
	}
	b := r.insts[1]
	old := slices.Clone(b.args)
	wider := r.set
	wider.Routes = append(slices.Clone(r.set.Routes), topics.Route{In: r.set.Signals + "-reroute", Out: r.set.Cohort + "-reroute"})
	args, err := replaceRun(old, workload.TopicFlags(r.set), workload.TopicFlags(wider))
	if err != nil {
		return err
	}
	r.logf("stop %s and start it with one route more (%d signals produced)", b.name, r.produced.Load())
	if err := b.term(60 * time.Second); err != nil {
		r.finding("%v", err)
	}
	b.args = args
	b.expectNextExit()
	if err := b.start(); err != nil {
		return err
	}
	select {
	case <-b.exitedCh():
	case <-time.After(2 * time.Minute):
		r.finding("%s, started with other routes than its group's, still runs after 2m: the group must refuse it at once", b.name)
		if err := b.term(60 * time.Second); err != nil {
			r.finding("%v", err)
		}
	case <-ctx.Done():
		return ctx.Err()
	}
	if lines := b.grepLog(1, "runs with other routes"); len(lines) == 0 {
		r.finding("%s exited without saying that its routes differ from its group's; last lines:\n%s", b.name, indent(b.tail(15)))
	}
	b.args = old
	if err := r.settleOrRecover(ctx, "while "+b.name+" was refused"); err != nil {
		return err
	}
	if err := r.waitProduced(ctx, 2.0/3); err != nil {
		return err
	}
	r.logf("roll back: start %s with the group's routes (%d signals produced)", b.name, r.produced.Load())
	if err := b.start(); err != nil {
		return err
	}
	return r.settleOrRecover(ctx, "after rolling "+b.name+" back")
}

// replaceRun returns args with the first run of from replaced by to.
func replaceRun(args, from, to []string) ([]string, error) {
	for i := 0; i+len(from) <= len(args); i++ {
		if slices.Equal(args[i:i+len(from)], from) {
			return slices.Concat(args[:i], to, args[i+len(from):]), nil
		}
	}
	return nil, fmt.Errorf("the flags %q are not among %q", strings.Join(from, " "), strings.Join(args, " "))
}
