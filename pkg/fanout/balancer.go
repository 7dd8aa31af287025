package fanout

import (
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// With more than one route, one instance must own partition p of every
// route's input at once: a claim (the commands of p, the state and the
// changelog records of p's users) has a single writer, and a leave applied
// to it stops the user's signals on every route. Kafka's balancers assign
// each topic's partitions on their own, so byPartition balances the first
// route's input with franz-go's cooperative-sticky balancer and gives each
// member, with partition p of that input, partition p of every other
// input. Moves are then those of the first input, in the same two
// cooperative rounds: a partition number leaves its old owner on every
// input before any input of it reaches the new one.
//
// The group protocol's name carries the route set (routesProtocol): a
// member whose routes differ from the running group's shares no protocol
// with it, so Kafka refuses it at its join (INCONSISTENT_GROUP_PROTOCOL),
// and the running members keep their partitions. Under one name the new
// member would be admitted and every rebalance refused by the balancer:
// the group would forward nothing for as long as it stayed. The refused
// instance halts with a *RoutesDifferError. Changing the routes therefore
// takes a stop of every instance of the group, or a new group. One route
// is a route set too: two instances reading different single inputs under
// Kafka's own protocol would both claim partition 0 of the commands.
func balancerFor(inputs []string) kgo.GroupBalancer {
	return &byPartition{inputs: inputs, sticky: kgo.CooperativeStickyBalancer(), protocol: routesProtocol(inputs)}
}

type byPartition struct {
	inputs   []string // the routes' inputs; the first is balanced
	sticky   kgo.GroupBalancer
	protocol string // routesProtocol(inputs)
}

func (b *byPartition) ProtocolName() string { return b.protocol }
func (*byPartition) IsCooperative() bool    { return true }

func (b *byPartition) JoinGroupMetadata(interests []string, current map[string][]int32, generation int32) []byte {
	return b.sticky.JoinGroupMetadata(interests, current, generation)
}

func (*byPartition) ParseSyncAssignment(assignment []byte) (map[string][]int32, error) {
	return kgo.ParseConsumerSyncAssignment(assignment)
}

// MemberBalancer refuses a group whose members do not all consume exactly
// this instance's inputs (instances with different routes), and hands the
// sticky balancer the members as if they consumed the first input only.
func (b *byPartition) MemberBalancer(members []kmsg.JoinGroupResponseMember) (kgo.GroupMemberBalancer, map[string]struct{}, error) {
	want := slices.Sorted(slices.Values(b.inputs))
	primary := b.inputs[0]
	narrowed := make([]kmsg.JoinGroupResponseMember, len(members))
	for i, m := range members {
		meta := kmsg.NewConsumerMemberMetadata()
		if err := meta.ReadFrom(m.ProtocolMetadata); err != nil {
			return nil, nil, fmt.Errorf("member %s: unable to read its metadata: %w", m.MemberID, err)
		}
		if got := slices.Sorted(slices.Values(meta.Topics)); !slices.Equal(got, want) {
			return nil, nil, fmt.Errorf("member %s consumes %v but this instance's routes read %v: "+
				"every instance of the group must have the same routes", m.MemberID, got, want)
		}
		meta.Topics = []string{primary}
		meta.OwnedPartitions = slices.DeleteFunc(meta.OwnedPartitions, func(o kmsg.ConsumerMemberMetadataOwnedPartition) bool {
			return o.Topic != primary
		})
		if len(meta.UserData) > 0 {
			sticky := kmsg.NewStickyMemberMetadata()
			if err := sticky.ReadFrom(meta.UserData); err == nil {
				sticky.CurrentAssignment = slices.DeleteFunc(sticky.CurrentAssignment, func(a kmsg.StickyMemberMetadataCurrentAssignment) bool {
					return a.Topic != primary
				})
				meta.UserData = sticky.AppendTo(nil)
			}
		}
		m.ProtocolMetadata = meta.AppendTo(nil)
		narrowed[i] = m
	}
	inner, _, err := b.sticky.MemberBalancer(narrowed)
	if err != nil {
		return nil, nil, err
	}
	topics := make(map[string]struct{}, len(b.inputs))
	for _, t := range b.inputs {
		topics[t] = struct{}{}
	}
	return &byPartitionMembers{inner: inner, inputs: b.inputs}, topics, nil
}

type byPartitionMembers struct {
	inner  kgo.GroupMemberBalancer
	inputs []string
}

// Balance is never called: franz-go calls BalanceOrError.
func (m *byPartitionMembers) Balance(map[string]int32) kgo.IntoSyncAssignment { return nil }

// BalanceOrError refuses inputs whose partition counts differ (the
// processor checked them at start; a topic grown since breaks the
// co-partitioning) and extends the first input's plan to every input.
func (m *byPartitionMembers) BalanceOrError(topics map[string]int32) (kgo.IntoSyncAssignment, error) {
	primary := m.inputs[0]
	n, ok := topics[primary]
	if !ok {
		return nil, fmt.Errorf("no partition count known for %s", primary)
	}
	for _, t := range m.inputs[1:] {
		if topics[t] != n {
			return nil, fmt.Errorf("%s has %d partitions but %s has %d: the routes' inputs must be co-partitioned", t, topics[t], primary, n)
		}
	}
	var into kgo.IntoSyncAssignment
	if oe, ok := m.inner.(kgo.GroupMemberBalancerOrError); ok {
		var err error
		if into, err = oe.BalanceOrError(map[string]int32{primary: n}); err != nil {
			return nil, err
		}
	} else {
		into = m.inner.Balance(map[string]int32{primary: n})
	}
	return extendPlan(into.IntoSyncAssignment(), m.inputs)
}

// extendPlan gives every member, for each partition of the first input it
// is assigned, the same partition of every other input.
func extendPlan(plan []kmsg.SyncGroupRequestGroupAssignment, inputs []string) (syncAssignments, error) {
	out := make(syncAssignments, len(plan))
	for i, a := range plan {
		var ma kmsg.ConsumerMemberAssignment
		ma.Default()
		if err := ma.ReadFrom(a.MemberAssignment); err != nil {
			return nil, fmt.Errorf("member %s: unable to read the sticky plan: %w", a.MemberID, err)
		}
		var parts []int32
		for _, t := range ma.Topics {
			if t.Topic == inputs[0] {
				parts = t.Partitions
			}
		}
		ma.Topics = ma.Topics[:0]
		if len(parts) > 0 {
			for _, in := range inputs {
				ma.Topics = append(ma.Topics, kmsg.ConsumerMemberAssignmentTopic{Topic: in, Partitions: slices.Clone(parts)})
			}
		}
		out[i] = kmsg.SyncGroupRequestGroupAssignment{MemberID: a.MemberID, MemberAssignment: ma.AppendTo(nil)}
	}
	return out, nil
}

// syncAssignments is a finished plan.
type syncAssignments []kmsg.SyncGroupRequestGroupAssignment

func (s syncAssignments) IntoSyncAssignment() []kmsg.SyncGroupRequestGroupAssignment { return s }
