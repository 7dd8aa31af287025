package main

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// cluster drives the brokers of integration/kafka/kafka.sh's three-node
// cluster (start-cluster) for the broker-fault scenarios: it finds which
// node leads a partition, coordinates a transactional ID or leads the
// controller quorum, and kills, pauses, resumes, stops and restarts nodes
// through the script. A node's number in the script is its Kafka node id.
type cluster struct {
	script string // path of kafka.sh
	cl     *kgo.Client
	adm    *kadm.Client
	logf   func(format string, args ...any)
	// timeout bounds one script command; a restart waits for the node to
	// answer, which takes seconds on an idle machine and longer on a
	// busy one.
	timeout time.Duration
}

// The script's commands on one node.
const (
	nodeKill    = "kill-broker"    // kill -9
	nodePause   = "pause-broker"   // SIGSTOP
	nodeResume  = "resume-broker"  // SIGCONT
	nodeStop    = "stop-broker"    // SIGTERM: a controlled shutdown
	nodeRestart = "restart-broker" // start a stopped or killed node over its data, and wait until it answers
)

// do runs the script's command on node.
func (c *cluster) do(ctx context.Context, command string, node int32) error {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	start := time.Now()
	cmd := exec.CommandContext(ctx, "bash", c.script, command, fmt.Sprint(node))
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s %d: %w\n%s", c.script, command, node, err, strings.TrimSpace(string(out)))
	}
	c.logf("broker %d: %s in %v", node, command, time.Since(start).Round(time.Millisecond))
	return nil
}

// leader returns the node that leads partition p of topic.
func (c *cluster) leader(ctx context.Context, topic string, p int32) (int32, error) {
	td, err := c.adm.ListTopics(ctx, topic)
	if err != nil {
		return -1, err
	}
	return leaderOf(td, topic, p)
}

// leaderOf finds the leader of topic's partition p in td.
func leaderOf(td kadm.TopicDetails, topic string, p int32) (int32, error) {
	t, ok := td[topic]
	if !ok || t.Err != nil {
		return -1, fmt.Errorf("topic %s: not in metadata (%v)", topic, t.Err)
	}
	pd, ok := t.Partitions[p]
	switch {
	case !ok:
		return -1, fmt.Errorf("%s/%d: no such partition", topic, p)
	case pd.Err != nil:
		return -1, fmt.Errorf("%s/%d: %w", topic, p, pd.Err)
	case pd.Leader < 0:
		return -1, fmt.Errorf("%s/%d: no leader", topic, p)
	}
	return pd.Leader, nil
}

// coordinator returns the node that coordinates transactional ID txnID
// (FindCoordinator with key type 1).
func (c *cluster) coordinator(ctx context.Context, txnID string) (int32, error) {
	r, ok := c.adm.FindTxnCoordinators(ctx, txnID)[txnID]
	switch {
	case !ok:
		return -1, fmt.Errorf("no coordinator answer for %s", txnID)
	case r.Err != nil:
		return -1, fmt.Errorf("coordinator of %s: %w", txnID, r.Err)
	}
	return r.NodeID, nil
}

// controller returns the active controller: the leader of the KRaft
// quorum (DescribeQuorum of __cluster_metadata, which a broker forwards to
// the controllers). Metadata's controller id is no help: a KRaft broker
// names a random live broker there.
func (c *cluster) controller(ctx context.Context) (int32, error) {
	req := kmsg.NewPtrDescribeQuorumRequest()
	t := kmsg.NewDescribeQuorumRequestTopic()
	t.Topic = "__cluster_metadata"
	t.Partitions = []kmsg.DescribeQuorumRequestTopicPartition{kmsg.NewDescribeQuorumRequestTopicPartition()}
	req.Topics = append(req.Topics, t)
	resp, err := req.RequestWith(ctx, c.cl)
	if err != nil {
		return -1, err
	}
	return quorumLeader(resp)
}

// quorumLeader reads the quorum's leader from a DescribeQuorum response.
func quorumLeader(resp *kmsg.DescribeQuorumResponse) (int32, error) {
	if err := kerr.ErrorForCode(resp.ErrorCode); err != nil {
		return -1, fmt.Errorf("describe quorum: %w", err)
	}
	if len(resp.Topics) == 0 || len(resp.Topics[0].Partitions) == 0 {
		return -1, errors.New("describe quorum: empty answer")
	}
	p := resp.Topics[0].Partitions[0]
	if err := kerr.ErrorForCode(p.ErrorCode); err != nil {
		return -1, fmt.Errorf("describe quorum: %w", err)
	}
	if p.LeaderID < 0 {
		return -1, errors.New("describe quorum: no leader")
	}
	return p.LeaderID, nil
}

// replicated returns nil once every partition of the cluster, internal
// topics included, has a leader and every replica in sync: a node that
// came back has caught up, and the next fault cannot take a partition
// below min.insync.replicas by surprise.
func (c *cluster) replicated(ctx context.Context) error {
	td, err := c.adm.ListTopicsWithInternal(ctx)
	if err != nil {
		return err
	}
	return underReplicated(td)
}

// underReplicated names the partitions of td without a leader or with a
// replica out of sync, or returns nil.
func underReplicated(td kadm.TopicDetails) error {
	var bad []string
	for _, t := range td.Sorted() {
		if t.Err != nil {
			bad = append(bad, fmt.Sprintf("%s: %v", t.Topic, t.Err))
			continue
		}
		for _, p := range t.Partitions.Sorted() {
			if p.Leader < 0 || len(p.ISR) < len(p.Replicas) {
				bad = append(bad, fmt.Sprintf("%s/%d (leader %d, isr %v of %v)", t.Topic, p.Partition, p.Leader, p.ISR, p.Replicas))
			}
		}
	}
	if len(bad) == 0 {
		return nil
	}
	if len(bad) > 4 {
		bad = append(bad[:4], fmt.Sprintf("and %d more", len(bad)-4))
	}
	return fmt.Errorf("under-replicated: %s", strings.Join(bad, ", "))
}
