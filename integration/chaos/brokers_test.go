package main

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestLeaderOf(t *testing.T) {
	td := kadm.TopicDetails{
		"s": {Topic: "s", Partitions: kadm.PartitionDetails{
			0: {Partition: 0, Leader: 2},
			1: {Partition: 1, Leader: -1},
			2: {Partition: 2, Leader: 3, Err: kerr.LeaderNotAvailable},
		}},
		"gone": {Topic: "gone", Err: kerr.UnknownTopicOrPartition},
	}
	for _, tc := range []struct {
		name  string
		topic string
		p     int32
		want  int32
		err   string
	}{
		{"a leader", "s", 0, 2, ""},
		{"no leader", "s", 1, -1, "no leader"},
		{"a partition error", "s", 2, -1, "LEADER_NOT_AVAILABLE"},
		{"no such partition", "s", 7, -1, "no such partition"},
		{"a topic error", "gone", 0, -1, "not in metadata"},
		{"an unknown topic", "x", 0, -1, "not in metadata"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := leaderOf(td, tc.topic, tc.p)
			if got != tc.want || (tc.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("leaderOf = %d, %v; want %d and an error with %q", got, err, tc.want, tc.err)
			}
		})
	}
}

func TestUnderReplicated(t *testing.T) {
	full := kadm.PartitionDetail{Partition: 0, Leader: 1, Replicas: []int32{1, 2, 3}, ISR: []int32{1, 2, 3}}
	shrunk := kadm.PartitionDetail{Partition: 1, Leader: 1, Replicas: []int32{1, 2, 3}, ISR: []int32{1, 3}}
	leaderless := kadm.PartitionDetail{Partition: 2, Leader: -1, Replicas: []int32{1, 2, 3}, ISR: []int32{2}}
	for _, tc := range []struct {
		name string
		td   kadm.TopicDetails
		want []string // in the error; none: nil
	}{
		{"all in sync", kadm.TopicDetails{"a": {Topic: "a", Partitions: kadm.PartitionDetails{0: full}}}, nil},
		{"a replica out of sync", kadm.TopicDetails{"a": {Topic: "a", Partitions: kadm.PartitionDetails{0: full, 1: shrunk}}}, []string{"a/1", "isr [1 3]"}},
		{"no leader", kadm.TopicDetails{"__transaction_state": {Topic: "__transaction_state", Partitions: kadm.PartitionDetails{2: leaderless}}}, []string{"__transaction_state/2", "leader -1"}},
		{"a topic error", kadm.TopicDetails{"b": {Topic: "b", Err: kerr.UnknownTopicOrPartition}}, []string{"b: "}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := underReplicated(tc.td)
			if tc.want == nil {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("%v: lacks %q", err, w)
				}
			}
		})
	}
}

func TestQuorumLeader(t *testing.T) {
	answer := func(code int16, leader int32, partitions int) *kmsg.DescribeQuorumResponse {
		resp := kmsg.NewPtrDescribeQuorumResponse()
		topic := kmsg.NewDescribeQuorumResponseTopic()
		topic.Topic = "__cluster_metadata"
		for range partitions {
			p := kmsg.NewDescribeQuorumResponseTopicPartition()
			p.ErrorCode, p.LeaderID = code, leader
			topic.Partitions = append(topic.Partitions, p)
		}
		resp.Topics = append(resp.Topics, topic)
		return resp
	}
	topLevel := answer(0, 1, 1)
	topLevel.ErrorCode = kerr.ClusterAuthorizationFailed.Code
	for _, tc := range []struct {
		name string
		resp *kmsg.DescribeQuorumResponse
		want int32
		err  string
	}{
		{"the leader", answer(0, 3, 1), 3, ""},
		{"no leader yet", answer(0, -1, 1), -1, "no leader"},
		{"a partition error", answer(kerr.NotLeaderForPartition.Code, 2, 1), -1, "NOT_LEADER"},
		{"a request error", topLevel, -1, "CLUSTER_AUTHORIZATION"},
		{"no partition", answer(0, 1, 0), -1, "empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := quorumLeader(tc.resp)
			if got != tc.want || (tc.err == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.err)) {
				t.Fatalf("quorumLeader = %d, %v; want %d and an error with %q", got, err, tc.want, tc.err)
			}
		})
	}
}

// TestClusterLookups finds leaders and a transaction coordinator on a
// three-broker kfake cluster: each is one of its brokers, and the
// coordinator is the one FindCoordinator names to any client.
func TestClusterLookups(t *testing.T) {
	c, err := kfake.NewCluster(kfake.NumBrokers(3), kfake.SeedTopics(4, "s"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	m, err := adm.BrokerMetadata(ctx)
	if err != nil {
		t.Fatal(err)
	}
	nodes := m.Brokers.NodeIDs()
	cs := &cluster{cl: cl, adm: adm, logf: t.Logf, timeout: 10 * time.Second}
	for p := range int32(4) {
		leader, err := cs.leader(ctx, "s", p)
		if err != nil || !slices.Contains(nodes, leader) {
			t.Fatalf("leader of s/%d = %d, %v; want one of %v", p, leader, err, nodes)
		}
	}
	coord, err := cs.coordinator(ctx, "cohortgate-a")
	if err != nil || !slices.Contains(nodes, coord) {
		t.Fatalf("coordinator = %d, %v; want one of %v", coord, err, nodes)
	}
	req := kmsg.NewPtrFindCoordinatorRequest()
	req.CoordinatorType = 1
	req.CoordinatorKeys = []string{"cohortgate-a"}
	resp, err := req.RequestWith(ctx, cl)
	if err != nil || len(resp.Coordinators) != 1 || resp.Coordinators[0].NodeID != coord {
		t.Fatalf("FindCoordinator says %+v, %v; the lookup said %d", resp, err, coord)
	}
}

// TestClusterDo runs kafka.sh's node commands through a stand-in script
// that records its arguments, and fails as the script fails.
func TestClusterDo(t *testing.T) {
	dir := t.TempDir()
	calls := filepath.Join(dir, "calls")
	script := filepath.Join(dir, "kafka.sh")
	body := "echo \"$@\" >>" + calls + "\n[ \"$2\" != 9 ] || { echo 'no such node' >&2; exit 1; }\n"
	if err := os.WriteFile(script, []byte(body), 0o755); err != nil {
		t.Fatal(err)
	}
	c := &cluster{script: script, logf: t.Logf, timeout: 10 * time.Second}
	ctx := context.Background()
	for _, step := range []struct {
		command string
		node    int32
	}{{nodeKill, 2}, {nodeRestart, 2}, {nodePause, 3}, {nodeResume, 3}, {nodeStop, 1}} {
		if err := c.do(ctx, step.command, step.node); err != nil {
			t.Fatal(err)
		}
	}
	err := c.do(ctx, nodeKill, 9)
	if err == nil || !strings.Contains(err.Error(), "no such node") {
		t.Fatalf("do on a failing script = %v; want its output in the error", err)
	}
	got, err := os.ReadFile(calls)
	if err != nil {
		t.Fatal(err)
	}
	want := "kill-broker 2\nrestart-broker 2\npause-broker 3\nresume-broker 3\nstop-broker 1\nkill-broker 9\n"
	if string(got) != want {
		t.Fatalf("the script ran\n%s\nwant\n%s", got, want)
	}
}
