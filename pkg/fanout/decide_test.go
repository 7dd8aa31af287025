package fanout

import (
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
)

// TestSignals drives the verdict on a signal (judge, then the gate) through
// testdata/signals: one case per rule S1 to S5 of the README and per bug
// of the signals side. No broker: a partition's alignment is observations
// and an applied offset, the gate is fed from a membership store on an
// in-memory file system by leave and rejoin commands.
//
// Times in the file are milliseconds since the Unix epoch. Commands:
//
//	rules [partitions=n] [grace=d] [skew=d] [cohort-limit=bytes]
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

// signal builds the record, judges it as a decision pass of its partition
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
	v := st.rules.judge(kp, r, 0, rfl, refused, st.nowMs*int64(time.Millisecond), av)
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
