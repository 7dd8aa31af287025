package fanout

import (
	"slices"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// member is one group member as the balancer sees it.
type member struct {
	id     string
	topics []string
	owned  map[string][]int32
	gen    int32
}

// balance runs b as the group leader would over members and returns each
// member's assignment.
func balance(t *testing.T, b kgo.GroupBalancer, counts map[string]int32, members ...member) (map[string]map[string][]int32, error) {
	t.Helper()
	var join []kmsg.JoinGroupResponseMember
	for _, m := range members {
		join = append(join, kmsg.JoinGroupResponseMember{MemberID: m.id,
			ProtocolMetadata: b.JoinGroupMetadata(slices.Sorted(slices.Values(m.topics)), m.owned, m.gen)})
	}
	mb, topics, err := b.MemberBalancer(join)
	if err != nil {
		return nil, err
	}
	for _, in := range members[0].topics {
		if _, ok := topics[in]; !ok {
			t.Errorf("the balancer does not ask for %s's partition count", in)
		}
	}
	into, err := mb.(kgo.GroupMemberBalancerOrError).BalanceOrError(counts)
	if err != nil {
		return nil, err
	}
	out := make(map[string]map[string][]int32)
	for _, a := range into.IntoSyncAssignment() {
		got, err := b.ParseSyncAssignment(a.MemberAssignment)
		if err != nil {
			t.Fatalf("member %s: %v", a.MemberID, err)
		}
		out[a.MemberID] = got
	}
	return out, nil
}

// byNumber checks that every member holds the same partitions of every
// input and that no partition is held twice, and returns the numbers each
// member holds.
func byNumber(t *testing.T, inputs []string, plan map[string]map[string][]int32) map[string][]int32 {
	t.Helper()
	out := make(map[string][]int32)
	holder := make(map[int32]string)
	for id, a := range plan {
		first := slices.Sorted(slices.Values(a[inputs[0]]))
		for _, in := range inputs[1:] {
			if got := slices.Sorted(slices.Values(a[in])); !slices.Equal(got, first) {
				t.Errorf("member %s holds %v of %s but %v of %s", id, first, inputs[0], got, in)
			}
		}
		for _, p := range first {
			if h, dup := holder[p]; dup {
				t.Errorf("partition %d held by %s and %s", p, h, id)
			}
			holder[p] = id
		}
		out[id] = first
	}
	return out
}

func TestBalancerByPartition(t *testing.T) {
	inputs := []string{"signals", "attribution", "clicks"}
	counts := map[string]int32{"signals": 6, "attribution": 6, "clicks": 6}
	b := balancerFor(inputs)
	if !b.IsCooperative() || b.ProtocolName() != routesProtocol(inputs) {
		t.Fatalf("balancer %s (cooperative %v), want %s, cooperative", b.ProtocolName(), b.IsCooperative(), routesProtocol(inputs))
	}

	// Two members start: every number goes to one of them, on every input.
	plan, err := balance(t, b, counts, member{id: "a", topics: inputs}, member{id: "b", topics: inputs})
	if err != nil {
		t.Fatal(err)
	}
	held := byNumber(t, inputs, plan)
	if n := len(held["a"]) + len(held["b"]); n != 6 || len(held["a"]) != 3 {
		t.Fatalf("after the first join: %v, want 3 partitions each", held)
	}

	// A third joins. Cooperatively, what moves to it leaves its owner on
	// every input in the first round, and reaches it in the second.
	own := func(id string) map[string][]int32 { return plan[id] }
	plan, err = balance(t, b, counts,
		member{id: "a", topics: inputs, owned: own("a"), gen: 1},
		member{id: "b", topics: inputs, owned: own("b"), gen: 1},
		member{id: "c", topics: inputs, gen: -1})
	if err != nil {
		t.Fatal(err)
	}
	round1 := byNumber(t, inputs, plan)
	if len(round1["c"]) != 0 {
		t.Errorf("round 1 gives c %v before their owners revoked them", round1["c"])
	}
	kept := len(round1["a"]) + len(round1["b"])
	if kept != 4 {
		t.Errorf("round 1 keeps %d numbers with a and b, want 4 (two move to c)", kept)
	}
	plan, err = balance(t, b, counts,
		member{id: "a", topics: inputs, owned: plan["a"], gen: 2},
		member{id: "b", topics: inputs, owned: plan["b"], gen: 2},
		member{id: "c", topics: inputs, gen: -1})
	if err != nil {
		t.Fatal(err)
	}
	round2 := byNumber(t, inputs, plan)
	for _, id := range []string{"a", "b", "c"} {
		if len(round2[id]) != 2 {
			t.Errorf("round 2: %v, want 2 partitions each", round2)
			break
		}
	}
	for _, id := range []string{"a", "b"} {
		for _, p := range round1[id] {
			if !slices.Contains(round2[id], p) {
				t.Errorf("round 2 moved partition %d from %s, which kept it in round 1 (not sticky)", p, id)
			}
		}
	}
}

func TestBalancerRefuses(t *testing.T) {
	inputs := []string{"signals", "attribution"}
	b := balancerFor(inputs)
	_, err := balance(t, b, map[string]int32{"signals": 6, "attribution": 6},
		member{id: "a", topics: inputs}, member{id: "b", topics: []string{"signals"}})
	if err == nil || !strings.Contains(err.Error(), "same routes") {
		t.Errorf("members with different routes: %v, want an error saying they need the same routes", err)
	}
	_, err = balance(t, b, map[string]int32{"signals": 6, "attribution": 4}, member{id: "a", topics: inputs})
	if err == nil || !strings.Contains(err.Error(), "co-partitioned") {
		t.Errorf("inputs of 6 and 4 partitions: %v, want an error saying they must be co-partitioned", err)
	}
}

// TestBalancerProtocolNamesRoutes: the group protocol differs between
// route sets (so Kafka refuses a member whose routes differ from the
// group's), one route and route order included, and is the same for the
// same routes (so a group upgrades instance by instance).
func TestBalancerProtocolNamesRoutes(t *testing.T) {
	sets := [][]string{{"signals"}, {"attribution"}, {"signals", "attribution"}, {"attribution", "signals"},
		{"signals", "attribution", "clicks"}}
	seen := make(map[string][]string)
	for _, s := range sets {
		name := balancerFor(s).ProtocolName()
		if other, dup := seen[name]; dup {
			t.Errorf("routes %q and %q share the group protocol %s", other, s, name)
		}
		seen[name] = s
		if again := balancerFor(slices.Clone(s)).ProtocolName(); again != name {
			t.Errorf("routes %q: protocol %s, then %s", s, name, again)
		}
		if !strings.HasPrefix(name, byPartitionProtocol+"-") || len(name) != len(byPartitionProtocol)+13 {
			t.Errorf("routes %q: protocol %q, want %s- and 12 hex digits", s, name, byPartitionProtocol)
		}
	}
}
