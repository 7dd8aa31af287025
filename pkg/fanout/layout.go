package fanout

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
)

// The partition counts and topic IDs of the commands, the routes' inputs
// and the changelog are part of the state: a user's commands are in
// partition murmur2(user) mod the commands' count, its signals in the same
// partition of every input, its changelog records in murmur2(user) mod the
// changelog's count. State built under one layout is never used under
// another.
//
//   - The store keeps the layout it was built under (a label written at
//     start). A start under other commands or input counts forgets the
//     store's users and checkpoints (membership.Store.Forget): every
//     partition is then restored under the new counts, from the changelog
//     and the commands, as an owner with an empty store is (handover.go).
//   - The commands topic deleted and created again (another ID under the
//     same name) halts the processor at start (CommandsRecreatedError): the
//     store reflects commands that are gone.
//   - The route set is topology too: the consumer group's protocol names
//     it (routesProtocol), so Kafka refuses an instance whose routes
//     differ from the running group's, and it halts (RoutesDifferError).
//   - While running, a watcher (topology.go) compares the topics with the
//     layout found at start; any change of a count or ID ends the run
//     (TopologyChangedError), and Run starts again under the new layout.
//   - Offset metadata carries, per partition, the commands count under
//     which its commands were last read and the changelog count its users'
//     records were written under (claim.meta): a new owner knows whether a
//     restore may read one changelog partition, and which partitions still
//     hold commands of the old layout whose users moved (their tails are
//     re-published to the partitions that own them now, before any
//     signal of those is decided: see migration in group.go).

// topicShape is one topic as the layout records it.
type topicShape struct {
	Name       string `json:"name"`
	ID         string `json:"id"`
	Partitions int32  `json:"partitions"`
}

// layout is the shape of every topic the state depends on.
type layout struct {
	Commands  topicShape   `json:"commands"`
	Inputs    []topicShape `json:"inputs"` // in route order
	Changelog topicShape   `json:"changelog"`
}

// layoutLabel is the store label the layout is kept under.
const layoutLabel = "layout"

func (l layout) encode() []byte {
	b, err := json.Marshal(l)
	if err != nil {
		panic(fmt.Sprintf("fanout: encoding the layout: %v", err)) // strings and integers only
	}
	return b
}

func decodeLayout(b []byte) (layout, error) {
	var l layout
	if err := json.Unmarshal(b, &l); err != nil {
		return layout{}, fmt.Errorf("the store's layout label %q does not decode: %w", b, err)
	}
	return l, nil
}

// partitions is the commands' partition count, that of every input too.
func (l layout) partitions() int32 { return l.Commands.Partitions }

// countsDiffer reports whether state built under l holds users in other
// partitions than it would under o: the commands' or an input's partition
// count differs, or the inputs are other topics.
func (l layout) countsDiffer(o layout) bool {
	if l.Commands.Partitions != o.Commands.Partitions || len(l.Inputs) != len(o.Inputs) {
		return true
	}
	for i := range l.Inputs {
		if l.Inputs[i].Name != o.Inputs[i].Name || l.Inputs[i].Partitions != o.Inputs[i].Partitions {
			return true
		}
	}
	return false
}

// changes lists, for a person, how o differs from l, one item a change.
func (l layout) changes(o layout) []string {
	var out []string
	shape := func(role string, a, b topicShape) {
		switch {
		case a.Name != b.Name:
			out = append(out, fmt.Sprintf("%s: %s is now %s", role, a.Name, b.Name))
		case a.ID != b.ID:
			out = append(out, fmt.Sprintf("%s %s was deleted and created again (topic ID %s, now %s)", role, a.Name, a.ID, b.ID))
		}
		if a.Name == b.Name && a.Partitions != b.Partitions {
			out = append(out, fmt.Sprintf("%s %s has %d partitions, %d before", role, a.Name, b.Partitions, a.Partitions))
		}
	}
	shape("commands topic", l.Commands, o.Commands)
	shape("changelog", l.Changelog, o.Changelog)
	for i := range max(len(l.Inputs), len(o.Inputs)) {
		switch {
		case i >= len(o.Inputs):
			out = append(out, fmt.Sprintf("input %s is no longer routed", l.Inputs[i].Name))
		case i >= len(l.Inputs):
			out = append(out, fmt.Sprintf("input %s is routed now", o.Inputs[i].Name))
		default:
			shape("input", l.Inputs[i], o.Inputs[i])
		}
	}
	return out
}

// inputFingerprints are the fingerprints of the inputs' topic IDs, in
// route order, as offset metadata carries them (offsetMeta.inputs).
func (l layout) inputFingerprints() []string {
	out := make([]string, len(l.Inputs))
	for i, in := range l.Inputs {
		out[i] = topicFingerprint(in.ID)
	}
	return out
}

// topicFingerprint is the head of a topic ID (its first 48 bits, in the
// base64 of the ID's string form), "-" for an ID not known: enough to
// tell a topic from the one it replaced under its name, and short enough
// that the offset metadata of many routes fits Kafka's bound on it
// (offset.metadata.max.bytes, 4096 by default).
func topicFingerprint(id string) string {
	if len(id) < 8 {
		return "-"
	}
	return id[:8]
}

// equal reports whether o is l.
func (l layout) equal(o layout) bool {
	return l.Commands == o.Commands && l.Changelog == o.Changelog && slices.Equal(l.Inputs, o.Inputs)
}

// routesProtocol names the group protocol of a route set: a prefix and
// the first 12 hex digits of the SHA-256 of the inputs in route order
// (the first is the one balanced, so the order matters), one per line: a
// topic name cannot hold a newline.
func routesProtocol(inputs []string) string {
	h := sha256.Sum256([]byte(strings.Join(inputs, "\n")))
	return byPartitionProtocol + "-" + hex.EncodeToString(h[:6])
}

// byPartitionProtocol prefixes the group protocol of byPartition.
const byPartitionProtocol = "cohortgate-by-partition"
