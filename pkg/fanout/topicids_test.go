package fanout

import (
	"slices"
	"testing"

	"github.com/twmb/franz-go/pkg/kadm"

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
