package fanout

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/pkg/gate"
	"github.com/cohortgate/cohortgate/pkg/membership"
	"github.com/cohortgate/cohortgate/topics"
)

// TestCommands drives the commands side (applier.applyFetched: apply and
// settle) through testdata/commands without a broker, on a membership
// store on an in-memory file system: one case per rule C1 to C7 of the
// README and per bug of the commands side. It prints what the outbox
// would carry (changelog records, DLQ records, re-published commands) and
// the events (late leaves), and the store's state when asked.
//
// Times in the file are milliseconds since the Unix epoch. Commands:
//
//	setup [partitions=n]                 a fresh store, gate and claims
//	claim partition=p [applied=n] [judged-below=n] [inherited-max=ms]
//	forwarded partition=p user=u ts=ms   the signals loop forwarded it
//	decided partition=p ts=ms            the signals loop decided through ms
//	window user=u left=ms through=ms [exact]
//	                                     a window the changelog holds (recovery)
//	apply partition=p                    one fetch; each input line is
//	                                     offset=n key=k [ts=ms] <value>
//	member user=u                        the user's record
func TestCommands(t *testing.T) {
	var st *commandsState
	defer func() {
		if st != nil {
			st.store.Close()
		}
	}()
	datadriven.RunTest(t, "testdata/commands", func(t *testing.T, d *datadriven.TestData) string {
		if d.Cmd == "setup" {
			if st != nil {
				st.store.Close()
			}
			st = newCommandsState(t, argsOf(d))
			return ""
		}
		if st == nil {
			t.Fatal("setup first")
		}
		return st.run(t, d)
	})
}

type commandsState struct {
	a      *applier
	store  *membership.Store
	source fakeWindows
	events []string
}

// fakeWindows is the changelog as recovery reads it.
type fakeWindows map[uint64][]membership.LateLeave

func (f fakeWindows) read(context.Context, readRequest) (changelogView, error) {
	n := 0
	for _, ws := range f {
		n += len(ws)
	}
	return changelogView{windows: f, stats: recoveryStats{records: len(f), windows: n}}, nil
}

func newCommandsState(t *testing.T, args map[string]string) *commandsState {
	return newCommandsStateOn(t, args, "db", &membership.Options{FS: vfs.NewMem(), NoSync: true})
}

// newCommandsStateOn is newCommandsState with a store in dir opened with
// opts.
func newCommandsStateOn(t testing.TB, args map[string]string, dir string, opts *membership.Options) *commandsState {
	store, err := membership.Open(dir, opts)
	if err != nil {
		t.Fatal(err)
	}
	st := &commandsState{store: store, source: make(fakeWindows)}
	cfg := Config{Brokers: []string{"127.0.0.1:1"}, Logger: slog.New(slog.DiscardHandler),
		Now: func() time.Time { return time.UnixMilli(1_000_000) }}
	cfg.EnsureDefaults()
	partitions := int32(1)
	if v, ok := args["partitions"]; ok {
		partitions = int32(atoi(t, v))
	}
	ev := EventListener{
		LateLeave: func(i LateLeaveInfo) {
			st.events = append(st.events, fmt.Sprintf("late leave: user %d window [%d, %d] exact %v", i.UserID,
				i.Window.LeftAtNs/1e6, i.Window.ForwardedThroughNs/1e6, i.Window.Exact))
		},
		WindowsRecovered: func(i WindowsRecoveredInfo) {
			st.events = append(st.events, fmt.Sprintf("recovered %d windows, %d awaiting replay", i.Windows, i.AwaitingReplay))
		},
	}
	ev.EnsureDefaults()
	st.a = &applier{cfg: &cfg, store: store, gate: gate.New(), claims: &claims{}, outbox: &outbox{store: store},
		ev: ev, partitions: partitions, kp: newKeyPartition(),
		recover: &recoverer{src: st.source, store: store, ev: ev, log: cfg.Logger, topic: cfg.Topics.Changelog,
			skip: cfg.Testing.UnsafeNoWindowRecovery}}
	return st
}

func (st *commandsState) run(t *testing.T, d *datadriven.TestData) string {
	args := argsOf(d)
	switch d.Cmd {
	case "claim":
		c := newClaim(int32(atoi(t, args["partition"])), 1, 0, int64(atoiOr(t, args["applied"], 0)))
		c.judgedBelow = int64(atoiOr(t, args["judged-below"], 0))
		if v, ok := args["inherited-max"]; ok {
			c.inheritedMaxNs = ms(t, v)
			c.maxEventNs.Store(c.inheritedMaxNs)
		}
		st.a.claims.put(c)
		return ""
	case "forwarded":
		c := st.a.claims.get(int32(atoi(t, args["partition"])))
		c.fwd.begin()
		c.fwd.end([]fwd{{user: uint64(atoi(t, args["user"])), ts: ms(t, args["ts"])}})
		c.fwd.settle(Committed)
		c.publishDeciding(0, 0, ms(t, args["ts"]))
		return ""
	case "decided":
		st.a.claims.get(int32(atoi(t, args["partition"]))).publishDeciding(0, 0, ms(t, args["ts"]))
		return ""
	case "window":
		_, exact := args["exact"]
		u := uint64(atoi(t, args["user"]))
		st.source[u] = append(st.source[u], membership.LateLeave{LeftAtNs: uint64(ms(t, args["left"])),
			ForwardedThroughNs: uint64(ms(t, args["through"])), Exact: exact})
		return ""
	case "apply":
		return st.apply(t, int32(atoi(t, args["partition"])), d.Input)
	case "member":
		m, err := st.store.Member(uint64(atoi(t, args["user"])))
		if err != nil {
			return err.Error()
		}
		return memberLine(m)
	}
	t.Fatalf("unknown command %q", d.Cmd)
	return ""
}

// apply feeds the input lines as one fetch of partition part and prints
// what the outbox and the events got.
func (st *commandsState) apply(t *testing.T, part int32, input string) string {
	fp := kgo.FetchTopicPartition{Topic: "membership.commands", FetchPartition: kgo.FetchPartition{Partition: part}}
	for _, line := range strings.Split(strings.TrimSpace(input), "\n") {
		r := &kgo.Record{Topic: "membership.commands", Partition: part, Timestamp: time.UnixMilli(1_000_000)}
	fields:
		for line != "" {
			field, rest, _ := strings.Cut(line, " ")
			k, v, _ := strings.Cut(field, "=")
			switch k {
			case "offset":
				r.Offset = int64(atoi(t, v))
			case "key":
				r.Key = []byte(v)
			case "ts":
				r.Timestamp = time.UnixMilli(int64(atoi(t, v)))
			default:
				break fields // the value: the rest of the line
			}
			line = rest
		}
		r.Value = []byte(line)
		fp.Records = append(fp.Records, r)
	}
	st.events = st.events[:0]
	if err := st.a.applyFetched(context.Background(), []kgo.FetchTopicPartition{fp}); err != nil {
		return "error: " + err.Error()
	}
	var out []string
	for _, it := range st.a.outbox.take() {
		r := it.record()
		switch r.Topic {
		case string(topics.Changelog):
			m, err := topics.DecodeMemberRecord(r.Value)
			if err != nil {
				t.Fatal(err)
			}
			line := "changelog " + recordLine(m)
			follows, dump, err := parseRestoreHeader([]byte(headerValue(r, topics.HeaderRestore)))
			if err != nil {
				t.Fatalf("changelog record of user %d: %v", m.UserID, err)
			}
			if d, err := membership.DecodeDump(dump); err != nil || d.Member.UserID != m.UserID {
				t.Fatalf("changelog record of user %d: restore header of user %d, %v", m.UserID, d.Member.UserID, err)
			}
			if m.Command != nil && follows.offset != m.Command.Offset {
				// A refused command's record (rule C7): the state as it
				// was, for the identity the header adds.
				line += fmt.Sprintf(" restated for offset=%d", follows.offset)
			}
			out = append(out, line)
		case string(topics.DLQ):
			out = append(out, fmt.Sprintf("dlq offset=%s reason=%s", headerValue(r, topics.HeaderSourceOffset), headerValue(r, topics.HeaderReason)))
		default:
			out = append(out, fmt.Sprintf("republish to=%s[%d] from=%s", r.Topic, r.Partition, headerValue(r, topics.HeaderMisroutedFrom)))
		}
	}
	out = append(out, st.events...)
	out = append(out, fmt.Sprintf("applied through %d", st.a.claims.get(part).applied.Load()))
	return strings.Join(out, "\n")
}

// recordLine is a changelog record in one line, times in ms.
func recordLine(m topics.MemberRecord) string {
	var b strings.Builder
	fmt.Fprintf(&b, "user=%d %s", m.UserID, m.Status)
	if m.LeftAtNs != nil {
		fmt.Fprintf(&b, "@%d", *m.LeftAtNs/1e6)
	}
	if len(m.History) > 0 {
		b.WriteString(" history=")
		for _, e := range m.History {
			fmt.Fprintf(&b, "[%d,%d)", e.LeftAtNs/1e6, e.RejoinedAtNs/1e6)
		}
	}
	for _, w := range m.LateLeaves {
		fmt.Fprintf(&b, " window=[%d,%d]", w.LeftAtNs/1e6, w.ForwardedThroughNs/1e6)
		if w.Exact {
			b.WriteString("exact")
		}
	}
	if c := m.Command; c != nil {
		fmt.Fprintf(&b, " by=%s@%d", c.Op, c.AtNs/1e6)
		switch {
		case c.Duplicate:
			b.WriteString(" duplicate")
		case !c.Changed:
			b.WriteString(" unchanged")
		}
	}
	return b.String()
}

// memberLine is a store member in one line, times in ms.
func memberLine(m membership.Member) string {
	var b strings.Builder
	fmt.Fprintf(&b, "user=%d %s", m.UserID, m.Status)
	if at, ok := m.LeftAt(); ok {
		fmt.Fprintf(&b, "@%d", at/1e6)
	}
	hs := make([]string, 0, len(m.History))
	for _, e := range m.History {
		hs = append(hs, fmt.Sprintf("[%d,%d)", e.LeftAtNs/1e6, e.RejoinedAtNs/1e6))
	}
	sort.Strings(hs)
	if len(hs) > 0 {
		b.WriteString(" history=" + strings.Join(hs, ""))
	}
	for _, w := range m.LateLeaves {
		fmt.Fprintf(&b, " window=[%d,%d]", w.LeftAtNs/1e6, w.ForwardedThroughNs/1e6)
		if w.Exact {
			b.WriteString("exact")
		}
	}
	return b.String()
}

func atoiOr(t *testing.T, s string, or int) int {
	if s == "" {
		return or
	}
	return atoi(t, s)
}
