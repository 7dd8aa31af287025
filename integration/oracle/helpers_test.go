package oracle

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// testTopics are the topics of the synthetic runs.
var testTopics = Topics{Commands: "commands", Signals: "signals", Cohort: "cohort", DLQ: "dlq", Changelog: "changelog"}

// testParts is the partition count of the synthetic runs.
const testParts = 3

// run builds a synthetic run record by record and hands each to a Judge,
// giving every topic partition consecutive offsets. Times are ms.
type run struct {
	t    *testing.T
	j    *Judge
	next map[string]map[int32]int64
	seq  int
	valueStyle
	calls []call // held back until report, when sealed
}

func newRun(t *testing.T, style valueStyle) *run {
	t.Helper()
	j, err := NewJudge(Config{Topics: testTopics, Partitions: testParts})
	if err != nil {
		t.Fatal(err)
	}
	return &run{t: t, j: j, next: make(map[string]map[int32]int64), valueStyle: style}
}

// valueStyle is how a synthetic run hands its records to the Judge.
type valueStyle struct {
	name string
	// numbered: signal values are "sig-<seq>-…", as the chaos load
	// writes them, so that the Judge keeps them in its table (compact.go)
	// rather than in full.
	numbered bool
	// sealed: the records are handed over as Verify does, commands
	// first, then Seal, the DLQ, the changelog, the inputs and the
	// outputs; otherwise as the case adds them.
	sealed bool
}

// valueStyles are the three ways a case is judged: opaque values in
// full, numbered ones in the table as they come, and numbered ones after
// Seal (5 bytes a signal outside every episode).
var valueStyles = []valueStyle{{"opaque", false, false}, {"numbered", true, false}, {"sealed", true, true}}

// Kinds of topic, in the order a sealed run hands them over.
type topicKind int

const (
	kindCommand topicKind = iota
	kindDLQ
	kindChangelog
	kindSignal
	kindCohort
)

// call is one record for the Judge: its topic's kind and route.
type call struct {
	kind  topicKind
	route int
	rec   Record
}

// add hands rec to the Judge, or holds it back until report when sealed.
func (r *run) add(kind topicKind, route int, rec Record) {
	if r.sealed {
		r.calls = append(r.calls, call{kind, route, rec})
		return
	}
	r.apply(call{kind, route, rec})
}

func (r *run) apply(c call) {
	switch c.kind {
	case kindCommand:
		r.j.AddCommand(c.rec)
	case kindDLQ:
		r.j.AddDLQ(c.rec)
	case kindChangelog:
		r.j.AddChangelog(c.rec)
	case kindSignal:
		r.j.AddRouteSignal(c.route, c.rec)
	case kindCohort:
		r.j.AddRouteCohort(c.route, c.rec)
	}
}

// report returns the Judge's Report, first handing over what a sealed
// run held back, in Verify's order.
func (r *run) report() Report {
	if r.sealed {
		slices.SortStableFunc(r.calls, func(a, b call) int { return cmp.Compare(a.kind, b.kind) })
		sealed := false
		for _, c := range r.calls {
			if c.kind != kindCommand && !sealed {
				r.j.Seal()
				sealed = true
			}
			r.apply(c)
		}
		if !sealed {
			r.j.Seal()
		}
		r.calls = nil
	}
	return r.j.Report()
}

// value returns a new signal value, unique to the run.
func (r *run) value() []byte {
	r.seq++
	if r.numbered {
		return []byte("sig-" + strconv.Itoa(r.seq) + "-....")
	}
	return []byte("v" + strconv.Itoa(r.seq))
}

func (r *run) offset(topic string, p int32) int64 {
	if r.next[topic] == nil {
		r.next[topic] = make(map[int32]int64)
	}
	o := r.next[topic][p]
	r.next[topic][p]++
	return o
}

func keyOf(user uint64) string { return strconv.FormatUint(user, 10) }

// right is the partition of key; wrong is another one.
func right(key string) int32 { return partitionOf([]byte(key), testParts) }
func wrong(key string) int32 { return (right(key) + 1) % testParts }

// rawCommand adds a commands record as given.
func (r *run) rawCommand(key []byte, p int32, value string, tsMs int64, hs ...Header) Record {
	rec := Record{Partition: p, Offset: r.offset(testTopics.Commands, p), Key: key, Value: []byte(value), Timestamp: tsMs, Headers: hs}
	r.add(kindCommand, 0, rec)
	return rec
}

// cmd adds a well-formed command, in its key's partition, stamped at its
// boundary.
func (r *run) cmd(user uint64, op string, atMs int64, req string) Record {
	v := fmt.Sprintf(`{"op":%q,"user_id":%d,"at_ns":%d,"request_id":%q}`, op, user, atMs*1e6, req)
	return r.rawCommand([]byte(keyOf(user)), right(keyOf(user)), v, atMs)
}

// rawSignal adds a signals record as given; its value is unique.
func (r *run) rawSignal(key []byte, p int32, tsMs int64, hs ...Header) Record {
	rec := Record{Partition: p, Offset: r.offset(testTopics.Signals, p), Key: key,
		Value: r.value(), Timestamp: tsMs, Headers: hs}
	r.add(kindSignal, 0, rec)
	return rec
}

// sig adds a signal of user in its key's partition.
func (r *run) sig(user uint64, tsMs int64, hs ...Header) Record {
	return r.rawSignal([]byte(keyOf(user)), right(keyOf(user)), tsMs, hs...)
}

// republish adds the copy a processor re-publishes of a misrouted record.
func (r *run) republish(topic string, rec Record) Record {
	cp := rec
	cp.Partition = right(string(rec.Key))
	cp.Offset = r.offset(topic, cp.Partition)
	cp.Headers = append(append([]Header(nil), rec.Headers...),
		Header{headerMisroutedFrom, []byte(pos{rec.Partition, rec.Offset}.String())})
	if topic == testTopics.Commands {
		r.add(kindCommand, 0, cp)
	} else {
		r.add(kindSignal, 0, cp)
	}
	return cp
}

// forward adds rec to the cohort topic, as a processor forwards it.
func (r *run) forward(recs ...Record) {
	for _, rec := range recs {
		cp := rec
		cp.Offset = r.offset(testTopics.Cohort, rec.Partition)
		r.add(kindCohort, 0, cp)
	}
}

// deadLetter adds a DLQ record naming rec of topic, with reason and any
// further headers.
func (r *run) deadLetter(topic string, rec Record, reason string, hs ...Header) {
	dl := Record{Key: rec.Key, Value: rec.Value, Offset: r.offset(testTopics.DLQ, 0), Headers: append([]Header{
		{headerReason, []byte(reason)},
		{headerSourceTopic, []byte(topic)},
		{headerSourcePartition, []byte(strconv.Itoa(int(rec.Partition)))},
		{headerSourceOffset, []byte(strconv.FormatInt(rec.Offset, 10))},
	}, hs...)}
	r.add(kindDLQ, 0, dl)
}

// truncated is the headers of a record_too_large DLQ copy.
func truncated(originalReason string, value []byte) []Header {
	return []Header{{headerOriginalReason, []byte(originalReason)}, {headerOriginalSHA256, []byte(sha256Hex(value))}}
}

// state is a changelog record's content, times in ms: leftAt < 0 is
// active; history pairs are [left, rejoined); windows are [left, through,
// exact (0/1)]; cmd names the command it follows.
type state struct {
	leftAt  int64
	history [][2]int64
	windows [][3]int64
	cmd     string
}

func (s state) json(user uint64) string {
	var b strings.Builder
	fmt.Fprintf(&b, `{"user_id":%d,`, user)
	if s.leftAt < 0 {
		b.WriteString(`"status":"active","left_at_ns":null,`)
	} else {
		fmt.Fprintf(&b, `"status":"left","left_at_ns":%d,`, s.leftAt*1e6)
	}
	b.WriteString(`"history":[`)
	for i, h := range s.history {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"left_at_ns":%d,"rejoined_at_ns":%d}`, h[0]*1e6, h[1]*1e6)
	}
	b.WriteString(`],"late_leaves":[`)
	for i, w := range s.windows {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"left_at_ns":%d,"forwarded_through_ns":%d,"exact":%v}`, w[0]*1e6, w[1]*1e6, w[2] == 1)
	}
	b.WriteString(`]`)
	if s.cmd != "" {
		fmt.Fprintf(&b, `,"command":{"op":"leave","topic":"commands","partition":0,"offset":%s,"changed":true}`, s.cmd)
	}
	b.WriteString(`,"receipt":{"applied_at_ns":1}}`)
	return b.String()
}

// changelog adds a changelog record of user.
func (r *run) changelog(user uint64, s state) {
	r.rawChangelog([]byte(keyOf(user)), s.json(user))
}

func (r *run) rawChangelog(key []byte, value string) {
	p := partitionOf(key, testParts)
	r.add(kindChangelog, 0, Record{Partition: p, Offset: r.offset(testTopics.Changelog, p), Key: key, Value: []byte(value)})
}

// active and left are changelog states without windows.
func active(history ...[2]int64) state         { return state{leftAt: -1, history: history} }
func left(at int64, history ...[2]int64) state { return state{leftAt: at, history: history} }

// gated is the marker a load puts on a signal promise 1 protects.
var gated = Header{HeaderExpect, []byte(ExpectGated)}

// counts are the Report's judgements a case checks.
type counts struct {
	Expected, Duplicates, Lost, Leaked, Unknown, Poison, Unrouted, Mismatches, Missing, Spurious, Contradictions int
	Late, Conservative                                                                                           int
}

func countsOf(r Report) counts {
	return counts{r.Expected, r.Duplicates, r.Lost, r.Leaked, r.Unknown, r.PoisonNotDLQd, r.MisroutedNotRepublished,
		r.ChangelogMismatches, r.MissingWindows, r.SpuriousWindows, r.Contradictions, r.Late, r.ConservativeWindows}
}

// damage is the damage c counts, as Report.Damage should sum it.
func (c counts) damage() int {
	return c.Duplicates + c.Lost + c.Leaked + c.Unknown + c.Poison + c.Unrouted + c.Mismatches + c.Missing + c.Spurious + c.Contradictions
}
