package fanout

import (
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/topics"
)

// The verdict on a signal is a pure function of the signal, the rules, the
// partition's alignment as a decision pass sees it, and any refusal of the
// signal's output: judge. Only the gate is left out, because the signals
// loop must publish what it is about to decide before it asks the gate
// (claim.publishDeciding), so that a leave applied meanwhile is judged
// late or not correctly. decide_test.go drives judge, and a gate, through
// testdata/signals, one case per rule.

// signalRules are what the verdict on a signal depends on besides the
// signal: the README's rules S1 to S5 with their parameters.
type signalRules struct {
	partitions int32         // of every input topic and the commands
	outs       []routeOut    // by route
	skew       time.Duration // Config.MaxFutureSkew
	grace      time.Duration // Config.Grace in force
}

// routeOut is where a route forwards to.
type routeOut struct {
	topic string
	limit int // bytes a forwarded record may take (batchBytes): the topic's max.message.bytes
}

// action is what becomes of a signal.
type action uint8

const (
	actHold       action = iota // wait: the partition's commands are not known complete through its deadline
	actGate                     // ask the gate: forward if it allows, drop if not
	actDeadLetter               // to the DLQ
	actRepublish                // to its key's partition of its own topic
)

func (a action) String() string {
	switch a {
	case actHold:
		return "hold"
	case actGate:
		return "gate"
	case actDeadLetter:
		return "dead-letter"
	case actRepublish:
		return "republish"
	}
	return fmt.Sprintf("action(%d)", uint8(a))
}

// verdict is what judge decided.
type verdict struct {
	act    action
	reason topics.Reason // actDeadLetter
	err    error         // actDeadLetter: what was wrong, for a person
	want   int32         // actRepublish: the key's partition
	user   uint64        // actGate
	tsNs   int64         // actGate: the event time, whole milliseconds
	// alone asks for the output in a record batch of its own: it was
	// refused before, maybe for another record of its batch (poison.go).
	alone bool
	// minimal asks for a minimal DLQ copy: a copy of it was refused.
	minimal bool
}

// alignView is what a decision pass knows of the signal's partition.
type alignView struct {
	// through is the wall-clock instant (an observation's early reading)
	// through which the commands are known applied, counting only
	// observations sent after the partition was assigned (and after
	// commands were re-published to it): alignment.alignedThrough.
	through int64
	known   bool // through is set
}

// judge settles r, read from the input of route, as far as the gate
// allows. The order of the checks is
// the contract: a refusal of what r became before is honoured first
// (poison.go); then a key that is not a user id (S1), a record in the
// wrong partition (S2), one too large to forward (S3) and an event time
// out of range or implausibly far ahead of seenNs, the clock's late
// reading when r was fetched (S4), are settled at once; anything else
// waits until its partition's commands are known complete through event
// time + grace by an observation sent after the assignment (S5), and then
// goes to the gate.
func (sr signalRules) judge(kp keyPartition, r *kgo.Record, route int, rfl refusal, refused bool, seenNs int64, av alignView) verdict {
	switch {
	case refused && rfl.deadLetter:
		return verdict{act: actDeadLetter, reason: refusalReason(rfl.err), err: rfl.err, minimal: true}
	case refused && rfl.alone:
		return verdict{act: actDeadLetter, reason: refusalReason(rfl.err), err: rfl.err}
	}
	user, err := topics.ParseUserID(r.Key)
	if err != nil {
		return verdict{act: actDeadLetter, reason: topics.ReasonOf(err), err: err}
	}
	if want := kp.of(r.Key, sr.partitions); want != r.Partition {
		return verdict{act: actRepublish, want: want, alone: refused}
	}
	// A forwarded copy is r's key, value and headers: r's size.
	if out := sr.outs[route]; batchBytes(r) > out.limit {
		return verdict{act: actDeadLetter, reason: topics.ReasonRecordTooLarge,
			err: fmt.Errorf("signal of %d bytes does not fit %s (max.message.bytes %d)", userBytes(r), out.topic, out.limit)}
	}
	ms := r.Timestamp.UnixMilli()
	if ms < 0 {
		return verdict{act: actDeadLetter, reason: topics.ReasonTimestampOutOfRange,
			err: fmt.Errorf("event time %d ms is before the Unix epoch", ms)}
	}
	if ms > (seenNs+sr.skew.Nanoseconds())/int64(time.Millisecond) {
		return verdict{act: actDeadLetter, reason: topics.ReasonTimestampSkew,
			err: fmt.Errorf("event time %d ms is %v ahead of this processor's clock (max %v)",
				ms, time.Duration(ms-seenNs/int64(time.Millisecond))*time.Millisecond, sr.skew)}
	}
	ts := ms * int64(time.Millisecond)
	if !av.known || ts+sr.grace.Nanoseconds() > av.through {
		return verdict{act: actHold}
	}
	return verdict{act: actGate, user: user, tsNs: ts, alone: refused}
}
