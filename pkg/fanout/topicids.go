package fanout

import (
	"fmt"
	"maps"
	"slices"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/cohortgate/cohortgate/topics"
)

// Every topic the processor reads or writes is known by its topic ID, not
// only its name: a topic deleted and created again under its name is
// another topic. franz-go never adopts the new ID of a topic a client
// has used (its metadata update says so and fails the topic with
// UNKNOWN_TOPIC_ID until the client forgets it), so a client that met the
// old topic can neither fetch from nor produce to the new one, for ever.
//
// The topics' watcher (topology.go) lists them every TopologyInterval
// with a Metadata request of its own and compares their IDs with those
// found at start, which are never newer than any client's:
//
//   - the commands, the inputs and the changelog are the layout
//     (layout.go); a new ID of any of them ends the run, and Run starts
//     again with new clients. A recreated commands topic then halts
//     (CommandsRecreatedError). The changelog is refilled with the current
//     record of every user of each owned partition (refill.go).
//   - the outputs (every route's output and the DLQ) hold no state: a new
//     ID of one ends the run just the same, and the next run's clients
//     produce to the new topic. What the cycles under way had produced to
//     the old one is aborted and produced again.

// outputIDs is the topic ID, by name, of every topic the processor writes
// beside the layout's: the routes' outputs and the DLQ.
type outputIDs map[string]string

// outputNames are the routes' outputs and the DLQ, each once, in route
// order with the DLQ last.
func outputNames(set topics.Set) []string {
	var out []string
	for _, r := range set.AllRoutes() {
		if !slices.Contains(out, string(r.Out)) {
			out = append(out, string(r.Out))
		}
	}
	if !slices.Contains(out, string(set.DLQ)) {
		out = append(out, string(set.DLQ))
	}
	return out
}

// outputIDsOf is the outputs' IDs as details describe them; a topic
// missing from details is absent.
func outputIDsOf(set topics.Set, details kadm.TopicDetails) outputIDs {
	out := make(outputIDs)
	for _, name := range outputNames(set) {
		if d, ok := details[name]; ok {
			out[name] = d.ID.String()
		}
	}
	return out
}

// changes lists, for a person, how the outputs now differ from o, one
// item a change, in name order.
func (o outputIDs) changes(now outputIDs) []string {
	var out []string
	for _, name := range slices.Sorted(maps.Keys(o)) {
		id, ok := now[name]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("output %s was deleted", name))
		case id != o[name]:
			out = append(out, fmt.Sprintf("output %s was deleted and created again (topic ID %s, now %s)", name, o[name], id))
		}
	}
	return out
}
