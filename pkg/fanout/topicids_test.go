package fanout

import (
	"context"
	"log/slog"
	"reflect"
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cohortgate/cohortgate/topics"
)

func TestOutputIDsChanges(t *testing.T) {
	set := topics.Set{Commands: "c", Signals: "s", Cohort: "out", DLQ: "dlq", Changelog: "cl",
		Routes: []topics.Route{{In: "s2", Out: "out2"}, {In: "s3", Out: "out"}}}
	if got, want := outputNames(set), []string{"out", "out2", "dlq"}; !slices.Equal(got, want) {
		t.Fatalf("outputNames = %v, want %v", got, want)
	}
	id := func(b byte) kadm.TopicID { return kadm.TopicID{b} }
	found := outputIDsOf(set, kadm.TopicDetails{"out": {ID: id(1)}, "out2": {ID: id(2)}, "dlq": {ID: id(3)}, "c": {ID: id(9)}})
	for _, tc := range []struct {
		name string
		now  kadm.TopicDetails
		want int
	}{
		{"same", kadm.TopicDetails{"out": {ID: id(1)}, "out2": {ID: id(2)}, "dlq": {ID: id(3)}}, 0},
		{"cohort recreated", kadm.TopicDetails{"out": {ID: id(4)}, "out2": {ID: id(2)}, "dlq": {ID: id(3)}}, 1},
		{"dlq deleted", kadm.TopicDetails{"out": {ID: id(1)}, "out2": {ID: id(2)}}, 1},
		{"all recreated", kadm.TopicDetails{"out": {ID: id(4)}, "out2": {ID: id(5)}, "dlq": {ID: id(6)}}, 3},
		{"another topic recreated", kadm.TopicDetails{"out": {ID: id(1)}, "out2": {ID: id(2)}, "dlq": {ID: id(3)}, "c": {ID: id(8)}}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := found.changes(outputIDsOf(set, tc.now)); len(got) != tc.want {
				t.Errorf("changes = %q, want %d", got, tc.want)
			}
		})
	}
}

// TestInputStartsAdjust: an offset committed for another topic of an
// input's name starts the partition at the beginning; one committed for
// the input as it is, or without the inputs' IDs, stays.
func TestInputStartsAdjust(t *testing.T) {
	found := layout{Inputs: []topicShape{{Name: "s", ID: "NEWNEWNEW="}, {Name: "s2", ID: "SAMESAME="}}}
	meta := func(ins ...string) *string {
		m := offsetMeta{eventNs: 1, judged: 2, changelogID: "cl", inputs: ins}.String()
		return &m
	}
	resp := kmsg.NewPtrOffsetFetchResponse()
	for _, tc := range []struct {
		topic string
		part  int32
		meta  *string
	}{
		{"s", 0, meta("OLDOLDOL", "SAMESAME")}, // s recreated since
		{"s", 1, meta("NEWNEWNE", "SAMESAME")}, // committed for s as it is
		{"s", 2, meta()},                       // an older version's
		{"s2", 0, meta("OLDOLDOL", "SAMESAME")},
		{"s2", 1, meta("-", "-")},
	} {
		rt := kmsg.NewOffsetFetchResponseTopic()
		rt.Topic = tc.topic
		rp := kmsg.NewOffsetFetchResponseTopicPartition()
		rp.Partition, rp.Offset, rp.Metadata = tc.part, 5, tc.meta
		rt.Partitions = append(rt.Partitions, rp)
		resp.Topics = append(resp.Topics, rt)
	}
	// Partition 3 of s2: the group has no commit.
	rt := kmsg.NewOffsetFetchResponseTopic()
	rt.Topic = "s2"
	rp := kmsg.NewOffsetFetchResponseTopicPartition()
	rp.Partition, rp.Offset = 3, -1
	rt.Partitions = append(rt.Partitions, rp)
	resp.Topics = append(resp.Topics, rt)
	s := newInputStarts([]string{"s", "s2"}, found, slog.New(slog.DiscardHandler))
	s.claims = &claims{}
	for p := range int32(4) {
		s.claims.put(newClaim(p, 2, 0, 0))
	}
	if err := s.fetched(context.Background(), nil, resp); err != nil {
		t.Fatal(err)
	}
	at := kgo.NewOffset().At(5)
	start := kgo.NewOffset().AtStart()
	offsets := map[string]map[int32]kgo.Offset{"s": {0: at, 1: at, 2: at}, "s2": {0: at, 1: at, 3: start}}
	got, err := s.adjust(context.Background(), offsets)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[int32]kgo.Offset{"s": {0: start, 1: at, 2: at}, "s2": {0: at, 1: at, 3: start}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("adjust = %v, want %v", got, want)
	}
	// What each claim learnt of its partitions' commits, by route: a
	// partition moved to the new topic's beginning has none any more.
	for _, tc := range []struct {
		part  int32
		route int
		want  int32
	}{
		{0, 0, offsetsNone}, {1, 0, offsetsCommitted}, {2, 0, offsetsCommitted}, {3, 0, offsetsUnknown},
		{0, 1, offsetsCommitted}, {1, 1, offsetsCommitted}, {2, 1, offsetsUnknown}, {3, 1, offsetsNone},
	} {
		if got := s.claims.get(tc.part).offsets[tc.route].Load(); got != tc.want {
			t.Errorf("partition %d route %d: offsets %d, want %d", tc.part, tc.route, got, tc.want)
		}
	}
}
