package fanout

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/pkg/membership"
	"github.com/cohortgate/cohortgate/topics"
)

// The rules, as pure verdicts. The verdict on a signal is a function of
// the signal, the rules, the partition's alignment as a decision pass sees
// it, and any refusal of the signal's output (signalRules.decide). Only the
// gate is left out, because the signals loop must publish what it is about
// to decide before it asks the gate (claim.publishDeciding), so that a
// leave applied meanwhile is detected late or not correctly. The verdict on
// a command is a function of the command's record and the topics' limits
// (commandRules.decide); what depends on the user's state (C5 to C7) is
// the store's, and storeRefusal names the reasons it refuses with. So a
// DLQ reason is decided here, except a broker's refusal of what a record
// became (poison.go). rules_test.go drives signalRules.decide, and a gate,
// through testdata/signals, one case per rule, and commandRules.decide
// through a table.

// signalRules are what the verdict on a signal depends on besides the
// signal: the README's rules S1 to S5 with their parameters.
type signalRules struct {
	partitions int32         // of every input topic and the commands
	outs       []routeOut    // by route
	skew       time.Duration // Config.MaxFutureSkew
	grace      time.Duration // Config.Grace in force
	lim        limits        // of every topic, read when the rules were made
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
	actApply                    // a command: to the store (rules C5 to C7)
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
	case actApply:
		return "apply"
	}
	return fmt.Sprintf("action(%d)", uint8(a))
}

// verdict is what signalRules.decide decided.
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
	// through is the wall-clock instant (an observation's low reading)
	// through which the commands are known applied, counting only
	// observations sent after the partition was assigned (and after
	// commands were re-published to it): alignment.alignedThrough.
	through int64
	known   bool // through is set
}

// decide settles r, read from the input of route, as far as the gate
// allows. The order of the checks is
// the contract: a refusal of what r became before is honoured first
// (poison.go); then a key that is not a user id (S1), a record in the
// wrong partition (S2: re-published, or dead-lettered when its copy with
// the header that says where it was found no longer fits its topic), one
// too large to forward (S3) and an event time
// out of range or implausibly far ahead of seenNs, the clock's high
// reading when r was fetched (S4), are settled at once; anything else
// waits until its partition's commands are known complete through event
// time + grace by an observation sent after the assignment (S5), and then
// goes to the gate.
func (sr signalRules) decide(kp keyPartition, r *kgo.Record, route int, rfl refusal, refused bool, seenNs int64, av alignView) verdict {
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
		if !sr.lim.fits(republishRecord(r, want)) {
			return verdict{act: actDeadLetter, reason: topics.ReasonRecordTooLarge,
				err: fmt.Errorf("misrouted record of %d bytes does not fit %s again with its header (max.message.bytes %d)",
					userBytes(r), r.Topic, sr.lim.of(r.Topic))}
		}
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

// commandRules are what the verdict on a command depends on besides its
// record: the README's rules C1 to C4 with their parameters.
type commandRules struct {
	partitions int32         // of both input topics
	skew       time.Duration // Config.MaxFutureSkew
}

// commandVerdict is what commandRules.decide decided.
type commandVerdict struct {
	act    action         // actApply, actDeadLetter or actRepublish
	reason topics.Reason  // actDeadLetter
	err    error          // actDeadLetter: what was wrong, for a person
	want   int32          // actRepublish: the key's partition
	cmd    topics.Command // actApply
	atNs   uint64         // actApply: the command's boundary (C4)
}

// decide settles the command in r as far as its record allows, under the
// topics' limits lim. The order of the checks is the contract: a key that
// is not a user id (C1); a record in the wrong partition (C2), re-published
// there, or dead-lettered when its copy with the header that says where it
// was found no longer fits its topic; a value that does not decode (C3); a
// boundary the processor cannot hold (C4). Anything else goes to the store.
func (cr commandRules) decide(kp keyPartition, r *kgo.Record, lim limits) commandVerdict {
	if _, err := topics.ParseUserID(r.Key); err != nil {
		return commandVerdict{act: actDeadLetter, reason: topics.ReasonOf(err), err: err}
	}
	if want := kp.of(r.Key, cr.partitions); want != r.Partition {
		if !lim.fits(republishCommand(r, want)) {
			return commandVerdict{act: actDeadLetter, reason: topics.ReasonRecordTooLarge,
				err: fmt.Errorf("misrouted command of %d bytes does not fit %s again with its header (max.message.bytes %d)",
					userBytes(r), r.Topic, lim.of(r.Topic))}
		}
		return commandVerdict{act: actRepublish, want: want}
	}
	cmd, err := topics.DecodeCommand(r.Key, r.Value)
	if err != nil {
		return commandVerdict{act: actDeadLetter, reason: topics.ReasonOf(err), err: err}
	}
	at, reason, err := boundary(cmd, r.Timestamp, cr.skew)
	if err != nil {
		return commandVerdict{act: actDeadLetter, reason: reason, err: err}
	}
	return commandVerdict{act: actApply, cmd: cmd, atNs: at}
}

// boundary returns a command's boundary: its at_ns, or its record
// timestamp when it has none (rule C4). A boundary that is no time the
// processor can hold (above 2^63-1 ns, or a record timestamp that is
// negative or beyond 2^63-1 ns) is refused with command_at_out_of_range;
// one more than skew ahead of the record's own timestamp with
// command_future_skew. Both checks read only the record, so a replay
// decides the same.
func boundary(cmd topics.Command, recordTs time.Time, skew time.Duration) (uint64, topics.Reason, error) {
	ms := recordTs.UnixMilli()
	tsOK := ms >= 0 && ms <= math.MaxInt64/int64(time.Millisecond)
	if !cmd.HasAt {
		if !tsOK {
			return 0, topics.ReasonCommandAtOutOfRange, fmt.Errorf("no at_ns, and the record timestamp %d ms is no time in 0..2^63-1 ns", ms)
		}
		return uint64(ms) * uint64(time.Millisecond), "", nil
	}
	if cmd.AtNs > math.MaxInt64 {
		return 0, topics.ReasonCommandAtOutOfRange, fmt.Errorf("at_ns %d is above 2^63-1 ns, no time the processor holds", cmd.AtNs)
	}
	// Unsigned, so that a negative record timestamp cannot overflow.
	ts := uint64(ms) * uint64(time.Millisecond)
	if ms < 0 || (tsOK && cmd.AtNs > ts && cmd.AtNs-ts > uint64(skew)) {
		return 0, topics.ReasonCommandFutureSkew, fmt.Errorf("at_ns %d is more than %v ahead of the record timestamp %d ms",
			cmd.AtNs, skew, ms)
	}
	return cmd.AtNs, "", nil
}

// storeRefusal returns the reason of a command the store refused by its
// rules (C7: a rejoin before the open leave, or past the episodes a user
// keeps), and false for any other error, which is the store's failure.
func storeRefusal(err error) (topics.Reason, bool) {
	switch {
	case errors.Is(err, membership.ErrRejoinBeforeLeave):
		return topics.ReasonRejoinBeforeLeave, true
	case errors.Is(err, membership.ErrHistoryFull):
		return topics.ReasonHistoryFull, true
	}
	return "", false
}
