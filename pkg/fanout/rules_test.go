package fanout

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/datadriven"
	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/pkg/gate"
	"github.com/cohortgate/cohortgate/pkg/membership"
	"github.com/cohortgate/cohortgate/topics"
)

// TestSignals drives the verdict on a signal (decide, then the gate) through
// testdata/signals: one case per rule S1 to S5 of the README and per bug
// of the signals side. No broker: a partition's alignment is observations
// and an applied offset, the gate is fed from a membership store on an
// in-memory file system by leave and rejoin commands.
//
// Times in the file are milliseconds since the Unix epoch. Commands:
//
//	rules [partitions=n] [grace=d] [skew=d] [cohort-limit=bytes] [signals-limit=bytes]
//	assign partition=p|all at=ms            a claim, assigned at ms
//	observe partition=p|all sent=ms end=n   an observation of its commands
//	applied partition=p|all next=n          its commands applied below n
//	now ms                              the processor's clock
//	leave|rejoin user=u at=ms [id=s]    a command, applied to the gate
//	refuse kind=content|alone|copy err=too-large|invalid-timestamp
//	                                    the next signal's output was refused
//	signal key=k [partition=p|wrong] [ts=ms] [bytes=n]
//	                                    prints the verdict
func TestSignals(t *testing.T) {
	store, err := membership.Open("db", &membership.Options{FS: vfs.NewMem(), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	st := &signalsState{
		rules:  signalRules{partitions: 6, grace: 50 * time.Millisecond, skew: 5 * time.Second, outs: []routeOut{{topic: "cohort.signals", limit: DefaultMaxMessageBytes}}},
		claims: make(map[int32]*claim),
		store:  store,
		gate:   gate.New(),
	}
	datadriven.RunTest(t, "testdata/signals", func(t *testing.T, d *datadriven.TestData) string {
		return st.run(t, d)
	})
}

// signalsState is the state of one testdata/signals file.
type signalsState struct {
	rules  signalRules
	claims map[int32]*claim
	nowMs  int64
	store  *membership.Store
	gate   *gate.Map
	refuse *refusal
}

func (st *signalsState) run(t *testing.T, d *datadriven.TestData) string {
	args := argsOf(d)
	switch d.Cmd {
	case "rules":
		if v, ok := args["partitions"]; ok {
			st.rules.partitions = int32(atoi(t, v))
		}
		if v, ok := args["grace"]; ok {
			st.rules.grace = duration(t, v)
		}
		if v, ok := args["skew"]; ok {
			st.rules.skew = duration(t, v)
		}
		if v, ok := args["cohort-limit"]; ok {
			st.rules.outs[0].limit = atoi(t, v)
		}
		if v, ok := args["signals-limit"]; ok {
			st.rules.lim = limits{byTopic: map[string]int{"signals": atoi(t, v)}}
		}
		return ""
	case "assign":
		for _, p := range st.partitions(t, args) {
			st.claims[p] = newClaim(p, 1, ms(t, args["at"]), 0)
		}
		return ""
	case "observe":
		for _, p := range st.partitions(t, args) {
			o := observation{sentNs: ms(t, args["sent"]), sentMono: ms(t, args["sent"]), end: int64(atoi(t, args["end"]))}
			if v, ok := args["mono"]; ok {
				o.sentMono = ms(t, v)
			}
			prev, regressed := st.claim(t, p).observe(o)
			if regressed {
				return fmt.Sprintf("regressed below %d", prev)
			}
		}
		return ""
	case "applied":
		for _, p := range st.partitions(t, args) {
			st.claim(t, p).applied.Store(int64(atoi(t, args["next"])))
		}
		return ""
	case "now":
		st.nowMs = int64(atoi(t, d.CmdArgs[0].Key))
		return ""
	case "leave", "rejoin":
		op := membership.OpLeave
		if d.Cmd == "rejoin" {
			op = membership.OpRejoin
		}
		ch, err := st.store.Apply(membership.Command{Op: op, UserID: uint64(atoi(t, args["user"])),
			AtNs: uint64(ms(t, args["at"])), RequestID: args["id"]})
		if err != nil {
			return err.Error()
		}
		if ch.Changed {
			if err := st.gate.Set(ch.After.UserID, gateEpisodes(nil, ch.After.Episodes(nil))); err != nil {
				t.Fatal(err)
			}
		}
		return fmt.Sprintf("changed %v duplicate %v", ch.Changed, ch.Duplicate)
	case "refuse":
		var err error = kerr.MessageTooLarge
		if args["err"] == "invalid-timestamp" {
			err = kerr.InvalidTimestamp
		}
		st.refuse = &refusal{err: err, alone: args["kind"] == "alone", deadLetter: args["kind"] == "copy"}
		return ""
	case "signal":
		return st.signal(t, args)
	}
	t.Fatalf("unknown command %q", d.Cmd)
	return ""
}

// partitions reads partition=p, or partition=all for every partition.
func (st *signalsState) partitions(t *testing.T, args map[string]string) []int32 {
	if args["partition"] == "all" {
		out := make([]int32, st.rules.partitions)
		for i := range out {
			out[i] = int32(i)
		}
		return out
	}
	return []int32{int32(atoi(t, args["partition"]))}
}

func (st *signalsState) claim(t *testing.T, p int32) *claim {
	c := st.claims[p]
	if c == nil {
		t.Fatalf("partition %d is not assigned", p)
	}
	return c
}

// signal builds the record, decides it as a decision pass of its partition
// would, and asks the gate when the verdict says so.
func (st *signalsState) signal(t *testing.T, args map[string]string) string {
	kp := newKeyPartition()
	key := []byte(args["key"])
	r := &kgo.Record{Topic: "signals", Key: key, Value: []byte("v"), Offset: 7}
	own := kp.of(key, st.rules.partitions)
	switch v := args["partition"]; v {
	case "":
		r.Partition = own
	case "wrong":
		r.Partition = (own + 1) % st.rules.partitions
	default:
		r.Partition = int32(atoi(t, v))
	}
	if v, ok := args["bytes"]; ok {
		r.Value = []byte(strings.Repeat("v", atoi(t, v)))
	}
	r.Timestamp = time.UnixMilli(int64(atoi(t, args["ts"])))
	var av alignView
	if c := st.claims[r.Partition]; c != nil {
		av.through, av.known = c.alignedThrough()
	}
	var rfl refusal
	refused := st.refuse != nil
	if refused {
		rfl, st.refuse = *st.refuse, nil
	}
	v := st.rules.decide(kp, r, 0, rfl, refused, st.nowMs*int64(time.Millisecond), av)
	var b strings.Builder
	switch v.act {
	case actHold:
		b.WriteString("hold")
	case actDeadLetter:
		fmt.Fprintf(&b, "dead-letter reason=%s", v.reason)
	case actRepublish:
		fmt.Fprintf(&b, "republish to=%d", v.want)
	case actGate:
		if st.gate.Allows(v.user, uint64(v.tsNs)) {
			fmt.Fprintf(&b, "forward user=%d ts=%d", v.user, v.tsNs/int64(time.Millisecond))
		} else {
			fmt.Fprintf(&b, "drop user=%d ts=%d", v.user, v.tsNs/int64(time.Millisecond))
		}
	}
	if v.alone {
		b.WriteString(" alone")
	}
	if v.minimal {
		b.WriteString(" minimal")
	}
	return b.String()
}

// argsOf returns a command's key=value arguments; a bare key maps to "".
func argsOf(d *datadriven.TestData) map[string]string {
	out := make(map[string]string, len(d.CmdArgs))
	for _, a := range d.CmdArgs {
		out[a.Key] = strings.Join(a.Vals, ",")
	}
	return out
}

func atoi(t testing.TB, s string) int {
	t.Helper()
	n, err := strconv.Atoi(s)
	if err != nil {
		t.Fatalf("not a number: %q", s)
	}
	return n
}

// ms reads milliseconds since the Unix epoch as ns.
func ms(t *testing.T, s string) int64 { return int64(atoi(t, s)) * int64(time.Millisecond) }

func duration(t *testing.T, s string) time.Duration {
	t.Helper()
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Fatalf("not a duration: %q", s)
	}
	return d
}

// TestCommandRules drives the verdict on a command's record through rules
// C1 to C4, in their order: each case breaks one rule, and the first rule
// broken decides.
func TestCommandRules(t *testing.T) {
	kp := newKeyPartition()
	rules := commandRules{partitions: 6, skew: 5 * time.Second}
	own := kp.of([]byte("42"), 6)
	ts := time.UnixMilli(1_000)
	rec := func(key string, partition int32, value string) *kgo.Record {
		return &kgo.Record{Topic: "commands", Key: []byte(key), Partition: partition, Value: []byte(value), Timestamp: ts}
	}
	leave := `{"op":"leave","user_id":42}`
	// The commands topic's limit fits a misrouted command with a request id
	// of 10 bytes once re-published, not one of 120.
	withID := func(n int) string {
		return `{"op":"leave","user_id":42,"request_id":"` + strings.Repeat("r", n) + `"}`
	}
	tight := limits{byTopic: map[string]int{"commands": batchBytes(republishCommand(rec("42", (own+1)%6, withID(10)), own))}}
	for _, tc := range []struct {
		name string
		r    *kgo.Record
		lim  limits
		want string
	}{
		{"C1 key", rec("042", own, leave), limits{}, "dead-letter key_leading_zero"},
		{"C1 before C2", rec("x", (own+1)%6, leave), limits{}, "dead-letter key_not_decimal"},
		{"C2 misrouted", rec("42", (own+1)%6, `{`), limits{}, fmt.Sprintf("republish %d", own)},
		{"C2 misrouted, fits", rec("42", (own+1)%6, withID(10)), tight, fmt.Sprintf("republish %d", own)},
		{"C2 misrouted, too large again", rec("42", (own+1)%6, withID(120)), tight, "dead-letter record_too_large"},
		{"C3 value", rec("42", own, `{"op":"stay","user_id":42}`), limits{}, "dead-letter command_op"},
		{"C3 user", rec("42", own, `{"op":"leave","user_id":43}`), limits{}, "dead-letter command_user_mismatch"},
		{"C4 at_ns above 2^63-1", rec("42", own, `{"op":"leave","user_id":42,"at_ns":9223372036854775808}`), limits{}, "dead-letter command_at_out_of_range"},
		{"C4 ahead of its record", rec("42", own, `{"op":"leave","user_id":42,"at_ns":6000000001}`), limits{}, "dead-letter command_future_skew"},
		{"C4 within the skew", rec("42", own, `{"op":"leave","user_id":42,"at_ns":6000000000}`), limits{}, "apply leave at 6000000000"},
		{"C4 the record's timestamp", rec("42", own, leave), limits{}, "apply leave at 1000000000"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v := rules.decide(kp, tc.r, tc.lim)
			var got string
			switch v.act {
			case actDeadLetter:
				got = fmt.Sprintf("dead-letter %s", v.reason)
				if v.err == nil {
					t.Error("a dead letter without its error for a person")
				}
			case actRepublish:
				got = fmt.Sprintf("republish %d", v.want)
			case actApply:
				got = fmt.Sprintf("apply %s at %d", v.cmd.Op, v.atNs)
			default:
				got = v.act.String()
			}
			if got != tc.want {
				t.Errorf("decide = %s, want %s", got, tc.want)
			}
		})
	}
}

// TestStoreRefusal maps the store's refusals (rule C7) to their reasons
// and leaves its failures alone.
func TestStoreRefusal(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want topics.Reason
		ok   bool
	}{
		{fmt.Errorf("apply: %w", membership.ErrRejoinBeforeLeave), topics.ReasonRejoinBeforeLeave, true},
		{fmt.Errorf("apply: %w", membership.ErrHistoryFull), topics.ReasonHistoryFull, true},
		{fmt.Errorf("disk: %w", errors.New("EIO")), "", false},
		{nil, "", false},
	} {
		if got, ok := storeRefusal(tc.err); got != tc.want || ok != tc.ok {
			t.Errorf("storeRefusal(%v) = %q, %v; want %q, %v", tc.err, got, ok, tc.want, tc.ok)
		}
	}
}
