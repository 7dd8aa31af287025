package fanout

import (
	"context"
	"errors"
	"hash/fnv"
	"strconv"
	"sync"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/topics"
)

// A record can be refused for a reason of its own after every check the
// processor makes before producing it: a broker whose limit is lower than
// the topic's config said, a topic that refuses old timestamps
// (message.timestamp.before.max.ms), a record the broker calls invalid. The
// cycle then aborts and the record's input is fetched again; produced the
// same way, it would be refused again, forever, and no partition would
// move (integration.TestBrokerRefusals). So the processor remembers a refusal and
// settles the input differently the next time: a DLQ copy becomes a
// minimal one (see minimalDeadLetter), an outbox entry is replaced (see
// refusedEntry), and a forwarded or re-published signal is first produced
// again alone: a broker refuses a whole record batch for one bad record,
// so the others in it are only suspects until refused on their own, after
// which they go to the DLQ.

// maxRefusals is how many times the broker may refuse what one record
// became (a DLQ copy, an outbox record) before the processor halts: by
// then it is a minimal copy or a trimmed changelog record sized by the
// topics' limits read after the last refusal, so the broker refuses it
// for something no retry can change, and producing it in every cycle
// would stall every partition without a word. A limit changed since
// starts the count again.
const maxRefusals = 3

// refusedByBroker reports whether err refuses this record for a reason of
// its own: producing it again the same way cannot succeed.
func refusedByBroker(err error) bool {
	for _, code := range []error{kerr.MessageTooLarge, kerr.RecordListTooLarge, kerr.InvalidRecord,
		kerr.CorruptMessage, kerr.InvalidTimestamp} {
		if errors.Is(err, code) {
			return true
		}
	}
	return false
}

// refusalReason is the DLQ reason of a record whose output was refused.
func refusalReason(err error) topics.Reason {
	if errors.Is(err, kerr.MessageTooLarge) || errors.Is(err, kerr.RecordListTooLarge) {
		return topics.ReasonRecordTooLarge
	}
	return topics.ReasonRecordRefused
}

// refusals remembers inputs whose outputs the broker refused, until each
// is met again. Promises (franz-go's goroutines) add; the signals loop
// takes. Inputs are known by their source (topic, partition, offset) when
// the refused record names it (a DLQ copy), otherwise by content (a
// forwarded or re-published signal carries its input's key, value and
// timestamp).
type refusals struct {
	n  atomic.Int32 // entries: the loop looks at nothing else while it is 0
	mu struct {
		sync.Mutex
		bySource  map[source]refusal
		byContent map[content]refusal
	}
}

// refusal is why an input's output was refused; whether that output was
// already its DLQ copy (the next must be minimal); and whether it was
// produced alone (it is then known to be the record refused).
type refusal struct {
	err        error
	deadLetter bool
	alone      bool
	tries      int // refusals of the input's outputs so far
}

type source struct {
	topic     string
	partition int32
	offset    int64
}

type content struct {
	key  string
	ts   int64
	size int
	sum  uint64
}

func contentOf(r *kgo.Record) content {
	h := fnv.New64a()
	h.Write(r.Value)
	return content{key: string(r.Key), ts: r.Timestamp.UnixMilli(), size: len(r.Value), sum: h.Sum64()}
}

// add remembers that out, produced for an input of the signals topic, was
// refused with err, and returns how many times that input's DLQ copies
// (or, for a forwarded or re-published copy, those) have been refused.
func (rf *refusals) add(out *kgo.Record, err error) (tries int) {
	rf.mu.Lock()
	defer rf.mu.Unlock()
	if src, ok := sourceOf(out); ok {
		if rf.mu.bySource == nil {
			rf.mu.bySource = make(map[source]refusal)
		}
		old, dup := rf.mu.bySource[src]
		if !dup {
			rf.n.Add(1)
		}
		rf.mu.bySource[src] = refusal{err: err, deadLetter: true, tries: old.tries + 1}
		return old.tries + 1
	}
	if rf.mu.byContent == nil {
		rf.mu.byContent = make(map[content]refusal)
	}
	c := contentOf(out)
	old, dup := rf.mu.byContent[c]
	if !dup {
		rf.n.Add(1)
	}
	_, alone := out.Context.(producedAlone)
	if p, ok := out.Context.(pinned); ok {
		alone = p.alone
	}
	rf.mu.byContent[c] = refusal{err: err, alone: alone, tries: old.tries + 1}
	return old.tries + 1
}

// forgetTooLarge drops the refusals for size: they were refused under
// limits that have changed since, and the inputs are decided again under
// the new ones.
func (rf *refusals) forgetTooLarge() {
	rf.mu.Lock()
	defer rf.mu.Unlock()
	for src, rfl := range rf.mu.bySource {
		if refusalReason(rfl.err) == topics.ReasonRecordTooLarge {
			delete(rf.mu.bySource, src)
			rf.n.Add(-1)
		}
	}
	for c, rfl := range rf.mu.byContent {
		if refusalReason(rfl.err) == topics.ReasonRecordTooLarge {
			delete(rf.mu.byContent, c)
			rf.n.Add(-1)
		}
	}
}

// producedAlone is the Context of a record produced in a batch of its own,
// to learn whether it is the one a broker refuses.
type producedAlone struct{ context.Context }

// take returns the refusal of input r; ok is false when there is none. The
// refusal is kept until forget: the cycle that settles r otherwise may
// still abort (for another record), and r is then decided again.
func (rf *refusals) take(r *kgo.Record) (rfl refusal, ok bool) {
	if rf.n.Load() == 0 {
		return refusal{}, false
	}
	rf.mu.Lock()
	defer rf.mu.Unlock()
	if rfl, ok := rf.mu.bySource[source{r.Topic, r.Partition, r.Offset}]; ok {
		return rfl, true
	}
	rfl, ok = rf.mu.byContent[contentOf(r)]
	return rfl, ok
}

// forget drops the refusals of inputs rs, settled in a committed cycle.
func (rf *refusals) forget(rs []*kgo.Record) {
	if len(rs) == 0 {
		return
	}
	rf.mu.Lock()
	defer rf.mu.Unlock()
	for _, r := range rs {
		src := source{r.Topic, r.Partition, r.Offset}
		if _, ok := rf.mu.bySource[src]; ok {
			delete(rf.mu.bySource, src)
			rf.n.Add(-1)
		}
		c := contentOf(r)
		if _, ok := rf.mu.byContent[c]; ok {
			delete(rf.mu.byContent, c)
			rf.n.Add(-1)
		}
	}
}

// sourceOf reads the source headers of a DLQ copy.
func sourceOf(r *kgo.Record) (source, bool) {
	var src source
	var okT, okP, okO bool
	for _, h := range r.Headers {
		switch h.Key {
		case topics.HeaderSourceTopic:
			src.topic, okT = string(h.Value), true
		case topics.HeaderSourcePartition:
			p, err := strconv.ParseInt(string(h.Value), 10, 32)
			src.partition, okP = int32(p), err == nil
		case topics.HeaderSourceOffset:
			o, err := strconv.ParseInt(string(h.Value), 10, 64)
			src.offset, okO = o, err == nil
		}
	}
	return src, okT && okP && okO
}
