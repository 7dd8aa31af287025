package fanout

import (
	"fmt"
	"strings"
	"time"

	"github.com/cohortgate/cohortgate/topics"
)

// The errors Run returns that a caller may act on, each naming what and
// where; errors.As finds them. A store's failure is the store's own
// *membership.StorageError, and an authorization failure wraps
// ErrNotAuthorized (authz.go).

// NotOwnerError is Member's answer for a user whose partition this
// instance does not own, or owns but has not caught up with yet.
type NotOwnerError struct {
	User uint64
	// Partition is the user's commands partition, -1 when no run is
	// under way (the processor is starting, between runs or stopped).
	Partition int32
	// CatchingUp is true when the partition is owned but its commands
	// are not yet applied through their end: ask again shortly.
	CatchingUp bool
}

func (e *NotOwnerError) Error() string {
	switch {
	case e.Partition < 0:
		return fmt.Sprintf("user %d: this instance owns no partition yet (not running, or joining its group)", e.User)
	case e.CatchingUp:
		return fmt.Sprintf("user %d: this instance is still catching up with commands partition %d; ask again shortly", e.User, e.Partition)
	}
	return fmt.Sprintf("user %d is in commands partition %d, which this instance does not own: "+
		"ask its owner (see /v1/partitions), or read the user's changelog record (processor status --brokers)", e.User, e.Partition)
}

// PartitionMismatchError reports route inputs that are not co-partitioned
// with the commands.
type PartitionMismatchError struct {
	Commands          topics.Topic
	CommandPartitions int
	// Inputs are the route inputs whose partition count differs from the
	// commands', in the order of the routes.
	Inputs []TopicPartitions
}

// TopicPartitions is a topic's partition count.
type TopicPartitions struct {
	Topic      topics.Topic
	Partitions int
}

// Error says what differs, one line per input, and how to fix it.
func (e *PartitionMismatchError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "input topics not co-partitioned with %s (%d partitions): partition p of the commands must hold "+
		"every command for the users whose signals are in partition p of every input", e.Commands, e.CommandPartitions)
	for _, in := range e.Inputs {
		fmt.Fprintf(&b, "\n  %s has %d partitions, %s has %d", in.Topic, in.Partitions, e.Commands, e.CommandPartitions)
	}
	fmt.Fprintf(&b, "\nfix: recreate the inputs with %d partitions, or, when they all agree, recreate %s with theirs "+
		"(its commands are the source of truth, so copy them over); or point --commands-topic and --route at co-partitioned topics",
		e.CommandPartitions, e.Commands)
	return b.String()
}

// MissingTopicsError reports topics that do not exist while topic creation
// is off.
type MissingTopicsError struct{ Topics []string }

func (e *MissingTopicsError) Error() string {
	return fmt.Sprintf("topics do not exist: %s; create them (commands and signals with equal partition counts; "+
		"commands with retention.ms=-1, changelog with cleanup.policy=compact) or run with topic creation enabled",
		strings.Join(e.Topics, ", "))
}

// CommandsGapError halts the processor: commands of a partition cannot be
// read from where the store says the next one is. Forwarding on would mean
// forwarding signals of users whose leave was skipped.
type CommandsGapError struct {
	Topic     string
	Partition int32
	Next      int64 // the store's checkpoint (next offset to apply), -1 if unknown
	End       int64 // the log end observed, -1 if unknown
	Err       error
}

func (e *CommandsGapError) Error() string {
	var what string
	switch {
	case e.End >= 0 && e.Next >= 0:
		what = fmt.Sprintf("log end %d is below the local checkpoint %d", e.End, e.Next)
	case e.Err != nil:
		what = e.Err.Error()
	default:
		what = "the position is not in the log"
	}
	return fmt.Sprintf("commands topic %s partition %d: %s; the topic was probably deleted and recreated, "+
		"or lost data. The local state no longer matches it. Way out: stop every processor, then either "+
		"restore the topic, or start each processor with an empty data directory (state is rebuilt from "+
		"the commands topic as it is now)", e.Topic, e.Partition, what)
}

func (e *CommandsGapError) Unwrap() error { return e.Err }

// TopologyChangedError ends a run whose topics changed under it: a
// partition count grew, or a topic was deleted and created again. Run
// starts again under the new layout (after forgetting the store's users
// when the commands' or inputs' counts changed), so the caller sees it
// only when that cannot be done. Meanwhile no signal is decided.
type TopologyChangedError struct {
	// Changes says what changed, one item a change.
	Changes []string
}

func (e *TopologyChangedError) Error() string {
	return "the topics changed under the running processor: " + strings.Join(e.Changes, "; ") +
		"; every partition stops forwarding and is restored under the new layout"
}

// CommandsRecreatedError halts a start whose store was built from a
// commands topic that no longer exists: one of the same name was created
// since (another topic ID). The store's state reflects commands that are
// gone, and its checkpoints offsets of the old log.
type CommandsRecreatedError struct {
	Topic        string
	StoreID, Now string // the topic IDs the store was built from, and found now
}

func (e *CommandsRecreatedError) Error() string {
	return fmt.Sprintf("commands topic %s was deleted and created again (topic ID %s when this data directory's state "+
		"was built, %s now): the state reflects commands that are gone. Way out: if the new topic holds the commands "+
		"that count, stop every processor and start each one with an empty data directory (the state is rebuilt from "+
		"the new topic, from offset 0); otherwise restore the old topic", e.Topic, e.StoreID, e.Now)
}

// RoutesDifferError halts an instance Kafka refused to admit to its
// consumer group because the group's running members have other routes
// (INCONSISTENT_GROUP_PROTOCOL: see balancerFor). The running members go
// on undisturbed.
type RoutesDifferError struct {
	Group    string
	Inputs   []string // this instance's routes' inputs, in route order
	Protocol string   // this instance's group protocol
	Err      error    // Kafka's refusal
}

func (e *RoutesDifferError) Error() string {
	return fmt.Sprintf("consumer group %q runs with other routes than this instance's (inputs %s, group protocol %s; "+
		"kafka-consumer-groups --describe --state shows the group's): Kafka refused to admit it: %v. "+
		"Every instance of a group must have the same routes in the same order: stop every instance before "+
		"changing the routes, or run the new routes under another --group",
		e.Group, strings.Join(e.Inputs, ", "), e.Protocol, e.Err)
}

func (e *RoutesDifferError) Unwrap() error { return e.Err }

// StallError is Run's error when the processor made no progress for
// Config.StallHalt: it halts, so that its orchestrator restarts it (a
// restart makes new clients, which resolve every topic again), rather
// than loop on in silence.
type StallError struct {
	Stall
	Lasted time.Duration
}

func (e *StallError) Error() string {
	return fmt.Sprintf("no progress for %v, halting: %v", e.Lasted.Round(time.Millisecond), e.Stall.String())
}

func (e *StallError) Unwrap() error { return e.Err }
