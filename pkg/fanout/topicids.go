package fanout

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

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
//     (CommandsRecreatedError). An input's partitions are read from the
//     new topic's beginning, whatever offsets were committed for the old
//     one (inputStarts). The changelog is refilled with the current
//     record of every user of each owned partition (refill.go).
//   - the outputs (every route's output and the DLQ) hold no state: a new
//     ID of one ends the run just the same, and the next run's clients
//     produce to the new topic. What the cycles under way had produced to
//     the old one is aborted and produced again: each cycle checks the
//     outputs' IDs before it commits (outputsCheck).

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

// inputStarts makes a signals session start each input partition whose
// committed offset was committed for another topic of the input's name
// at the new topic's beginning, not at that offset. Kafka deletes a
// topic's committed offsets with it, but a cycle under way when it was
// deleted commits its offsets by name, and they land on the new topic
// when it was created again meanwhile: resumed at them, the session would
// skip the new topic's records below them. The offset metadata names the
// inputs' IDs (offsetMeta.inputs); metadata that does not (an older
// version's) is believed.
//
// Its two callbacks run one after the other on the group's goroutine, on
// every assignment: fetched keeps the metadata of the offsets the group
// fetched, adjust moves the offsets it must and tells each claim (when
// claims is set) whether the group has a committed offset for its
// partitions (claim.offsets).
type inputStarts struct {
	inputs []string // the routes' inputs, in route order
	ids    []string // their fingerprints in the layout the run found
	log    interface{ Info(string, ...any) }
	claims *claims // nil in tests of the offsets alone

	mu struct {
		sync.Mutex
		meta map[string]map[int32]string // by input and partition
		// committed holds the partitions the group has a committed
		// offset for, by input.
		committed map[string]map[int32]bool
	}
}

func newInputStarts(inputs []string, found layout, log interface{ Info(string, ...any) }) *inputStarts {
	return &inputStarts{inputs: inputs, ids: found.inputFingerprints(), log: log}
}

// fetched is a kgo.OnOffsetsFetched callback.
func (s *inputStarts) fetched(_ context.Context, _ *kgo.Client, resp *kmsg.OffsetFetchResponse) error {
	meta := make(map[string]map[int32]string)
	committed := make(map[string]map[int32]bool)
	add := func(topic string, part int32, offset int64, m *string) {
		if offset >= 0 {
			if committed[topic] == nil {
				committed[topic] = make(map[int32]bool)
			}
			committed[topic][part] = true
		}
		if m == nil || *m == "" {
			return
		}
		if meta[topic] == nil {
			meta[topic] = make(map[int32]string)
		}
		meta[topic][part] = *m
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			add(t.Topic, p.Partition, p.Offset, p.Metadata)
		}
	}
	for _, g := range resp.Groups {
		for _, t := range g.Topics {
			for _, p := range t.Partitions {
				add(t.Topic, p.Partition, p.Offset, p.Metadata)
			}
		}
	}
	s.mu.Lock()
	s.mu.meta, s.mu.committed = meta, committed
	s.mu.Unlock()
	return nil
}

// adjust is a kgo.AdjustFetchOffsetsFn callback.
func (s *inputStarts) adjust(_ context.Context, offsets map[string]map[int32]kgo.Offset) (map[string]map[int32]kgo.Offset, error) {
	s.mu.Lock()
	meta, committed := s.mu.meta, s.mu.committed
	s.mu.meta, s.mu.committed = nil, nil
	s.mu.Unlock()
	for route, in := range s.inputs {
		for part := range offsets[in] {
			state := offsetsNone
			if committed[in][part] {
				state = offsetsCommitted
			}
			if s.moved(route, in, part, meta[in][part]) {
				offsets[in][part] = kgo.NewOffset().AtStart()
				state = offsetsNone // franz-go forgets the commit it replaces
			}
			if s.claims == nil {
				continue
			}
			if c := s.claims.get(part); c != nil && route < len(c.offsets) {
				c.offsets[route].Store(state)
			}
		}
	}
	return offsets, nil
}

// moved reports whether raw, the metadata committed with the offset of
// partition part of in (route's input), names another topic of the
// input's name: the offset is no position in this one.
func (s *inputStarts) moved(route int, in string, part int32, raw string) bool {
	if raw == "" {
		return false
	}
	m, err := parseMeta(raw)
	if err != nil || len(m.inputs) != len(s.ids) {
		return false
	}
	was, now := m.inputs[route], s.ids[route]
	if was == "-" || now == "-" || was == now {
		return false
	}
	s.log.Info("input created again since its offset was committed: read from the new topic's beginning",
		"topic", in, "partition", part, "was", was, "now", now)
	return true
}

// outputsCheck is asked, just before a cycle commits, whether the outputs
// are still the topics the run found. A client learns that a topic was
// created again only when it next refreshes its metadata, and until then
// a transaction that produced to the old topic commits: its records went
// into a log deleted before they were committed, so no reader saw them,
// while its input offsets, committed, say they were forwarded. Such a
// cycle is aborted instead, and its signals forwarded again by the next
// run, to the new topic. What is left is a deletion between the check and
// the commit (one Metadata round trip, then EndTxn): rare, and not
// closable from a client.
type outputsCheck struct {
	set   topics.Set
	found outputIDs
	list  func(ctx context.Context, names []string) (kadm.TopicDetails, error)
}

// outputsCheckTimeout bounds the check: a cycle whose check does not
// answer in time is aborted, like one whose check fails.
const outputsCheckTimeout = 10 * time.Second

// verify returns nil when every output has the ID found at start, and
// an error saying what changed, or why it could not tell, otherwise.
func (c *outputsCheck) verify(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, outputsCheckTimeout)
	defer cancel()
	details, err := c.list(ctx, outputNames(c.set))
	if err != nil {
		return fmt.Errorf("the outputs' topic IDs could not be checked before committing: %w", err)
	}
	if changes := c.found.changes(outputIDsOf(c.set, details)); len(changes) > 0 {
		return &TopologyChangedError{Changes: changes}
	}
	return nil
}
