package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/cohortgate/cohortgate/integration/workload"
)

// The broker-fault scenarios run only with --cluster: the brokers are the
// three nodes of kafka.sh start-cluster (replication factor 3,
// min.insync.replicas 2), and the processors keep running while nodes
// are killed, paused and restarted under them. Two processors share the
// partitions; each has a transactional ID the harness knows
// (<group>-<instance>), so that its coordinator can be found. Every fault
// ends with the node back and every partition fully in sync again before
// the next one, so that no scenario but broker-two-down takes a partition
// below min.insync.replicas.
var brokerScenarios = []scenario{
	{
		name: "broker-leaders", instances: 2, brokerFault: true,
		span: func(o *options) time.Duration { return time.Duration(o.rounds) * o.bounceSpan },
		act:  (*scenarioRun).killLeaders,
	},
	{
		name: "broker-coordinator", instances: 2, brokerFault: true,
		span: bounces(3),
		act:  (*scenarioRun).killCoordinator,
	},
	{
		name: "broker-controller", instances: 2, brokerFault: true,
		span: bounces(3),
		act:  (*scenarioRun).killController,
	},
	{
		name: "broker-pause", instances: 2, brokerFault: true,
		span: func(o *options) time.Duration { return 2*pausePast(o) + o.bounceSpan },
		act:  (*scenarioRun).pauseBroker,
	},
	{
		name: "broker-rolling", instances: 2, brokerFault: true,
		span: bounces(4),
		act:  (*scenarioRun).rollingRestart,
	},
	{
		name: "broker-two-down", instances: 2, brokerFault: true,
		span: func(o *options) time.Duration { return twoDownFor + 3*o.bounceSpan },
		act:  (*scenarioRun).twoDown,
	},
}

// bounces is a broker scenario's span: n times --bounce-span, about how
// long a node takes to be killed, started again and back in sync, so that
// the load is spread over the faults and they land while signals are
// forwarded.
func bounces(n int) func(*options) time.Duration {
	return func(o *options) time.Duration { return time.Duration(n) * o.bounceSpan }
}

const (
	// brokerDownFor is how long a killed node stays down: long enough
	// for the controller to fence it and move its leaderships (the
	// cluster's broker.session.timeout.ms is 6s, but a kill closes its
	// sockets, which the controller notices at once).
	brokerDownFor = 4 * time.Second
	// twoDownFor is how long broker-two-down keeps two nodes down.
	twoDownFor = 12 * time.Second
	// clusterReplicaLag is the cluster's replica.lag.time.max.ms
	// (kafka.sh), after which a silent follower leaves the ISR.
	clusterReplicaLag = 10 * time.Second
	// replicatedTimeout bounds the wait for every partition to be in
	// sync again after a node returns.
	replicatedTimeout = 3 * time.Minute
)

// pausePast is how long broker-pause keeps a node stopped at least:
// past the replica lag, the broker session (6s) and the processors'
// session timeout, plus a margin.
func pausePast(o *options) time.Duration {
	return max(clusterReplicaLag, o.sessionTimeout) + 5*time.Second
}

// allScenarios are the processor scenarios and the broker-fault ones.
func allScenarios() []scenario {
	return append(append([]scenario(nil), scenarios...), brokerScenarios...)
}

// bounce takes node down (kill -9, or a controlled stop), keeps it down
// for down, starts it again and waits until every partition is in sync.
func (r *scenarioRun) bounce(ctx context.Context, node int32, how string, down time.Duration) error {
	c := r.h.cluster
	r.logCoordinators(ctx)
	r.logf("%s broker %d (%d signals produced, %d forwarded visible)", how, node, r.produced.Load(), r.meter.count())
	if err := c.do(ctx, how, node); err != nil {
		return err
	}
	if err := workload.Sleep(ctx, down); err != nil {
		return err
	}
	if err := c.do(ctx, nodeRestart, node); err != nil {
		return err
	}
	return r.waitReplicated(ctx)
}

// waitReplicated waits until every partition of the cluster is in sync.
func (r *scenarioRun) waitReplicated(ctx context.Context) error {
	start := time.Now()
	if err := eventually(ctx, replicatedTimeout, func() error { return r.h.cluster.replicated(ctx) }); err != nil {
		return err
	}
	r.logf("every partition in sync again after %v", time.Since(start).Round(time.Millisecond))
	return nil
}

// killLeaders kills -9 the leader of a random signals partition, then of
// a random commands partition, and so on, --rounds times in all, spread
// over the load (round i once i/(rounds+1) of it is produced); each comes
// back after brokerDownFor.
func (r *scenarioRun) killLeaders(ctx context.Context) error {
	for i := range r.h.o.rounds {
		if err := r.waitProduced(ctx, float64(i+1)/float64(r.h.o.rounds+1)); err != nil {
			return err
		}
		topic := string(r.set.Signals)
		if i%2 == 1 {
			topic = string(r.set.Commands)
		}
		p := int32(r.rng.IntN(r.h.o.partitions))
		var node int32
		if err := eventually(ctx, 30*time.Second, func() (err error) {
			node, err = r.h.cluster.leader(ctx, topic, p)
			return err
		}); err != nil {
			return err
		}
		r.logf("round %d/%d: broker %d leads %s/%d", i+1, r.h.o.rounds, node, topic, p)
		if err := r.bounce(ctx, node, nodeKill, brokerDownFor); err != nil {
			return fmt.Errorf("round %d: %w", i+1, err)
		}
	}
	return nil
}

// killCoordinator kills -9 the transaction coordinator of a processor's
// transactional ID while a transaction of it is open: a, at a third of the
// load, and b at two thirds.
func (r *scenarioRun) killCoordinator(ctx context.Context) error {
	for i, at := range []float64{1.0 / 3, 2.0 / 3} {
		if err := r.waitProduced(ctx, at); err != nil {
			return err
		}
		txnID := r.txnID(r.insts[i%2])
		var node int32
		if err := eventually(ctx, 30*time.Second, func() (err error) { node, err = r.h.cluster.coordinator(ctx, txnID); return err }); err != nil {
			return err
		}
		// The processor commits every --commit-interval (100ms): while it
		// forwards, its transaction is open most of the time; wait for a
		// moment when it is. Once the load has ended (on a slow machine
		// the first bounce may outlast it) there may be none to wait for.
		err := eventually(ctx, 15*time.Second, func() error {
			d, err := r.h.adm.DescribeTransactions(ctx, txnID)
			if err != nil {
				return err
			}
			if s := d[txnID].State; s != "Ongoing" {
				return fmt.Errorf("transaction %s is %q, not Ongoing", txnID, s)
			}
			return nil
		})
		if err != nil {
			r.logf("broker %d coordinates %s; killing it without an open transaction: %v", node, txnID, err)
		} else {
			r.logf("broker %d coordinates %s, whose transaction is open", node, txnID)
		}
		if err := r.bounce(ctx, node, nodeKill, brokerDownFor); err != nil {
			return err
		}
	}
	return nil
}

// killController kills -9 the active controller (the leader of the KRaft
// quorum) at a third and at two thirds of the load, and checks that
// another node took over while it was down.
func (r *scenarioRun) killController(ctx context.Context) error {
	c := r.h.cluster
	for _, at := range []float64{1.0 / 3, 2.0 / 3} {
		if err := r.waitProduced(ctx, at); err != nil {
			return err
		}
		var node int32
		if err := eventually(ctx, 30*time.Second, func() (err error) { node, err = c.controller(ctx); return err }); err != nil {
			return err
		}
		r.logCoordinators(ctx)
		r.logf("broker %d is the active controller", node)
		if err := c.do(ctx, nodeKill, node); err != nil {
			return err
		}
		var next int32
		err := eventually(ctx, 30*time.Second, func() (err error) {
			if next, err = c.controller(ctx); err == nil && next == node {
				err = fmt.Errorf("broker %d, killed, still leads the quorum", node)
			}
			return err
		})
		if err != nil {
			return err
		}
		r.logf("broker %d took over as controller", next)
		if err := workload.Sleep(ctx, brokerDownFor); err != nil {
			return err
		}
		if err := c.do(ctx, nodeRestart, node); err != nil {
			return err
		}
		if err := r.waitReplicated(ctx); err != nil {
			return err
		}
	}
	return nil
}

// pauseBroker stops (SIGSTOP) the leader of signals partition 0 at a third
// of the load until it has fallen out of the partition's ISR (the replica
// lag) and for at least pausePast, then continues it (SIGCONT).
func (r *scenarioRun) pauseBroker(ctx context.Context) error {
	c := r.h.cluster
	if err := r.waitProduced(ctx, 1.0/3); err != nil {
		return err
	}
	topic := string(r.set.Signals)
	var node int32
	if err := eventually(ctx, 30*time.Second, func() (err error) { node, err = c.leader(ctx, topic, 0); return err }); err != nil {
		return err
	}
	r.logCoordinators(ctx)
	r.logf("SIGSTOP broker %d, the leader of %s/0 (%d signals produced)", node, topic, r.produced.Load())
	if err := c.do(ctx, nodePause, node); err != nil {
		return err
	}
	paused := time.Now()
	err := eventually(ctx, 2*time.Minute, func() error {
		td, err := c.adm.ListTopics(ctx, topic)
		if err != nil {
			return err
		}
		pd := td[topic].Partitions[0]
		if pd.Leader == node || containsNode(pd.ISR, node) {
			return fmt.Errorf("broker %d still leads %s/0 or is in its ISR %v", node, topic, pd.ISR)
		}
		return nil
	})
	if err != nil {
		_ = c.do(context.WithoutCancel(ctx), nodeResume, node)
		return err
	}
	r.logf("broker %d out of the ISR of %s/0 after %v", node, topic, time.Since(paused).Round(time.Millisecond))
	if err := workload.Sleep(ctx, pausePast(r.h.o)-time.Since(paused)); err != nil {
		_ = c.do(context.WithoutCancel(ctx), nodeResume, node)
		return err
	}
	r.logf("SIGCONT broker %d after %v", node, time.Since(paused).Round(time.Millisecond))
	if err := c.do(ctx, nodeResume, node); err != nil {
		return err
	}
	return r.waitReplicated(ctx)
}

func containsNode(nodes []int32, n int32) bool {
	for _, x := range nodes {
		if x == n {
			return true
		}
	}
	return false
}

// rollingRestart restarts the three nodes one after the other, each with
// a controlled shutdown (SIGTERM), at a quarter, half and three quarters
// of the load, each back in sync before the next goes down.
func (r *scenarioRun) rollingRestart(ctx context.Context) error {
	for i, node := range []int32{1, 2, 3} {
		if err := r.waitProduced(ctx, float64(i+1)/4); err != nil {
			return err
		}
		if err := r.bounce(ctx, node, nodeStop, 0); err != nil {
			return err
		}
	}
	return nil
}

// twoDown kills -9 two of the three nodes at a third of the load: every
// partition is below min.insync.replicas (or has no leader) and the
// controller quorum is lost, so nothing can be forwarded; the oracle
// checks that nothing was forwarded unchecked and nothing lost. After
// twoDownFor one node returns, and forwarding must resume by itself
// within two minutes (a finding otherwise); then the other returns.
func (r *scenarioRun) twoDown(ctx context.Context) error {
	c := r.h.cluster
	if err := r.waitProduced(ctx, 1.0/3); err != nil {
		return err
	}
	var first int32
	if err := eventually(ctx, 30*time.Second, func() (err error) {
		first, err = c.leader(ctx, string(r.set.Signals), 0)
		return err
	}); err != nil {
		return err
	}
	second := first%3 + 1
	r.logCoordinators(ctx)
	r.logf("kill -9 brokers %d and %d (%d signals produced, %d forwarded visible)", first, second, r.produced.Load(), r.meter.count())
	for _, n := range []int32{first, second} {
		if err := c.do(ctx, nodeKill, n); err != nil {
			return err
		}
	}
	if err := workload.Sleep(ctx, twoDownFor); err != nil {
		return err
	}
	before := r.meter.count()
	r.logf("restart broker %d (%d forwarded visible)", first, before)
	if err := c.do(ctx, nodeRestart, first); err != nil {
		return err
	}
	back := time.Now()
	err := eventually(ctx, 2*time.Minute, func() error {
		if r.meter.count() > before {
			return nil
		}
		return errors.New("no signal forwarded since")
	})
	if err != nil {
		r.finding("forwarding did not resume after broker %d returned: %v", first, err)
	} else {
		r.logf("forwarding resumed %v after broker %d returned", time.Since(back).Round(time.Millisecond), first)
	}
	if err := c.do(ctx, nodeRestart, second); err != nil {
		return err
	}
	return r.waitReplicated(ctx)
}

// logCoordinators logs which node coordinates each group and
// transactional ID of the row, the processors' and the floor's, just
// before a fault: a fault on the node that coordinates the processors'
// group or a transaction costs them what it does not cost the floor when
// the floor's coordinators are elsewhere (the nodes follow from a hash of
// the names), so a row's stall beside its floor is read with these.
func (r *scenarioRun) logCoordinators(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	node := func(r kadm.FindCoordinatorResponses, key string) string {
		c, ok := r[key]
		if !ok || c.Err != nil {
			return "?"
		}
		return fmt.Sprint(c.NodeID)
	}
	adm := r.h.adm
	floorGroup, floorTxn := r.group+"-floor", r.group+"-floor"
	if r.floor != nil {
		floorGroup, floorTxn = r.floor.group, r.floor.txnID
	}
	groups := adm.FindGroupCoordinators(ctx, r.group, floorGroup)
	txns := []string{floorTxn}
	for _, in := range r.insts {
		txns = append(txns, r.txnID(in))
	}
	tc := adm.FindTxnCoordinators(ctx, txns...)
	line := fmt.Sprintf("coordinators: group of the processors on broker %s, the floor's on %s; transactions:", node(groups, r.group), node(groups, floorGroup))
	for _, in := range r.insts {
		line += fmt.Sprintf(" %s on %s,", in.name, node(tc, r.txnID(in)))
	}
	r.logf("%s the floor's on %s", line, node(tc, floorTxn))
}

// txnID is the transactional ID the harness gives in with --cluster.
func (r *scenarioRun) txnID(in *instance) string { return r.group + "-" + in.name }
