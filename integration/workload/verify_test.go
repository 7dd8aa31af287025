package workload

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/topics"
)

const testParts = 3

// cluster starts an in-process kfake broker for one test.
func cluster(t *testing.T) []string {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// newSet creates a fresh set of topics named after prefix.
func newSet(t *testing.T, brokers []string, prefix string) topics.Set {
	t.Helper()
	set := Topics(prefix)
	cl := newClient(t, brokers)
	if err := CreateTopics(testCtx(t), kadm.NewClient(cl), set, testParts, 1); err != nil {
		t.Fatal(err)
	}
	return set
}

// newClient returns a client whose records go to the partition they name
// when Partition >= 0 and to their key's murmur2 partition otherwise.
func newClient(t *testing.T, brokers []string, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(append([]kgo.Opt{kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(pinOrKey{})}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

type pinOrKey struct{}

func (pinOrKey) ForTopic(string) kgo.TopicPartitioner { return pinOrKeyTopic{newKeyPartition()} }

type pinOrKeyTopic struct{ kp keyPartition }

func (pinOrKeyTopic) RequiresConsistency(*kgo.Record) bool { return true }
func (p pinOrKeyTopic) Partition(r *kgo.Record, n int) int {
	if r.Partition >= 0 {
		return int(r.Partition)
	}
	return int(p.kp.of(r.Key, int32(n)))
}

// t0 is the base of the hand-made event times.
var t0 = time.Unix(1_800_000_000, 0)

func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

// sig is a hand-made signal: seq, user (0 for a bad key), event time in
// seconds after t0, whether the oracle must expect it forwarded.
type sig struct {
	seq     uint64
	user    uint64
	secs    float64
	forward bool
}

// The hand-made case. Commands, per user (boundaries in seconds after t0):
//
//	1: leave 10, leave 5 (keeps 10), rejoin 30           → [10,30)
//	2: leave, no at_ns, record timestamp 10              → [10,∞)
//	3: leave 10, rejoin 20, leave 15 (clamped to 20),
//	   rejoin 18 (refused: before the open boundary)     → [10,20) [20,∞)
//	4: leave 10, rejoin 20, leave 10 (that leave again)  → [10,20)
//	6: a command that is not JSON                        → none
//	7: leave 10 misrouted, and its re-published copy     → [10,∞)
//	8: leave 10 misrouted, not (yet) re-published        → none
var handSignals = []sig{
	{0, 1, 5, true}, {1, 1, 7, true}, {2, 1, 15, false}, {3, 1, 29.999, false}, {4, 1, 30, true},
	{5, 2, 9.999, true}, {6, 2, 10, false},
	{7, 3, 5, true}, {8, 3, 19, false}, {9, 3, 25, false},
	{10, 4, 25, true}, {11, 4, 15, false},
	{12, 5, 1, true}, {13, 5, 50, true},
	{14, 6, 50, true},
	{15, 7, 15, false},
	{16, 8, 15, true},
	{17, 5, 60, true}, // produced misrouted, then re-published: one signal
	{18, 9, 5, false}, // dead-lettered (say, its timestamp was too far ahead)
	{19, 0, 5, false}, // key "01": not a user id, dead-lettered
}

func command(set topics.Set, op topics.Op, user uint64, secs float64, hasAt bool) *kgo.Record {
	c := topics.Command{Op: op, UserID: user, HasAt: hasAt}
	if hasAt {
		c.AtNs = uint64(at(secs).UnixNano())
	}
	return &kgo.Record{Topic: string(set.Commands), Partition: -1, Key: topics.AppendUserID(nil, user),
		Value: topics.AppendCommand(nil, c), Timestamp: at(secs)}
}

func signalRecord(set topics.Set, s sig) *kgo.Record {
	key := topics.AppendUserID(nil, s.user)
	if s.user == 0 {
		key = []byte("01")
	}
	return &kgo.Record{Topic: string(set.Signals), Partition: -1, Key: key,
		Value: AppendValue(nil, s.seq, 16), Timestamp: at(s.secs)}
}

// misroute sends r to a partition other than its key's, and returns the
// copy the processor would re-publish to the right one.
func misroute(r *kgo.Record) *kgo.Record {
	right := newKeyPartition().of(r.Key, testParts)
	r.Partition = (right + 1) % testParts
	cp := *r
	cp.Partition = right
	cp.Headers = []kgo.RecordHeader{{Key: topics.HeaderMisroutedFrom, Value: []byte(strconv.Itoa(int(r.Partition)) + "/0")}}
	return &cp
}

// produceHandInput writes the hand-made commands and signals to set.
func produceHandInput(t *testing.T, cl *kgo.Client, set topics.Set) {
	t.Helper()
	ctx := testCtx(t)
	leave, rejoin := topics.Leave, topics.Rejoin
	misrouted7 := command(set, leave, 7, 10, true)
	copy7 := misroute(misrouted7)
	misrouted8 := command(set, leave, 8, 10, true)
	misroute(misrouted8)
	bad := command(set, leave, 6, 10, true)
	bad.Value = []byte("not json")
	rs := []*kgo.Record{
		command(set, leave, 1, 10, true), command(set, leave, 1, 5, true), command(set, rejoin, 1, 30, true),
		command(set, leave, 2, 10, false),
		command(set, leave, 3, 10, true), command(set, rejoin, 3, 20, true), command(set, leave, 3, 15, true), command(set, rejoin, 3, 18, true),
		command(set, leave, 4, 10, true), command(set, rejoin, 4, 20, true), command(set, leave, 4, 10, true),
		bad, misrouted7, copy7, misrouted8,
	}
	for _, s := range handSignals {
		r := signalRecord(set, s)
		rs = append(rs, r)
		if s.seq == 17 {
			rs = append(rs, misroute(r))
		}
	}
	// One at a time: a user's commands must keep their order.
	for _, r := range rs {
		if err := cl.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	dead := signalRecord(set, handSignals[18])
	dead.Topic = string(set.DLQ)
	dead.Headers = []kgo.RecordHeader{{Key: topics.HeaderSourceTopic, Value: []byte(set.Signals)}}
	if err := cl.ProduceSync(ctx, dead).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// forward writes the signals with the given seqs to the cohort topic, as
// the processor forwards them.
func forward(t *testing.T, cl *kgo.Client, set topics.Set, seqs ...uint64) {
	t.Helper()
	for _, seq := range seqs {
		r := signalRecord(set, handSignals[seq])
		r.Topic = string(set.Cohort)
		if err := cl.ProduceSync(testCtx(t), r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

// changelog writes a changelog record for user: its episodes (in seconds
// after t0; an end of 0 is open) and late-leave windows.
func changelog(t *testing.T, cl *kgo.Client, set topics.Set, user uint64, eps [][2]float64, late ...[2]float64) {
	t.Helper()
	m := topics.MemberRecord{UserID: user, Status: "active", History: []topics.Episode{}, LateLeaves: []topics.LateLeave{}}
	ns := func(s float64) uint64 { return uint64(at(s).UnixNano()) }
	for _, e := range eps {
		if e[1] == 0 {
			left := ns(e[0])
			m.Status, m.LeftAtNs = "left", &left
			continue
		}
		m.History = append(m.History, topics.Episode{LeftAtNs: ns(e[0]), RejoinedAtNs: ns(e[1])})
	}
	for _, w := range late {
		m.LateLeaves = append(m.LateLeaves, topics.LateLeave{LeftAtNs: ns(w[0]), ForwardedThroughNs: ns(w[1])})
	}
	r := &kgo.Record{Topic: string(set.Changelog), Partition: -1, Key: topics.AppendUserID(nil, user), Value: topics.AppendMemberRecord(nil, m)}
	if err := cl.ProduceSync(testCtx(t), r).FirstErr(); err != nil {
		t.Fatal(err)
	}
}

// rightChangelog writes the records a correct processor leaves for the
// hand-made commands (after older ones it overwrites).
func rightChangelog(t *testing.T, cl *kgo.Client, set topics.Set) {
	changelog(t, cl, set, 1, [][2]float64{{10, 0}}) // superseded
	changelog(t, cl, set, 1, [][2]float64{{10, 30}})
	changelog(t, cl, set, 2, [][2]float64{{10, 0}})
	changelog(t, cl, set, 3, [][2]float64{{10, 20}, {20, 0}})
	changelog(t, cl, set, 4, [][2]float64{{10, 20}})
	changelog(t, cl, set, 7, [][2]float64{{10, 0}})
}

func expectedSeqs() []uint64 {
	var out []uint64
	for _, s := range handSignals {
		if s.forward {
			out = append(out, s.seq)
		}
	}
	return out
}

func TestVerifyCleanRun(t *testing.T) {
	brokers := cluster(t)
	set := newSet(t, brokers, "clean")
	cl := newClient(t, brokers)
	produceHandInput(t, cl, set)
	forward(t, cl, set, expectedSeqs()...)
	rightChangelog(t, cl, set)

	rep, err := Verify(testCtx(t), brokers, set, &VerifyOptions{Grace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	want := Report{
		SignalsIn: 20, Commands: 11, Refused: 1, Users: 5, Episodes: 6,
		Forwarded: 11, Expected: 11, DLQ: 1, Misrouted: 1, DeadLettered: 1,
		ChangelogUsers: 5,
	}
	rep.Took = 0
	if !reflectEqual(rep, want) {
		t.Fatalf("report\n %+v\nwant\n %+v", rep, want)
	}
	if rep.Damage() != 0 || rep.Details() != "" {
		t.Fatalf("damage %d: %s", rep.Damage(), rep.Details())
	}
}

// TestVerifyFindsDamage shows that the verifier can fail: one expected
// signal never forwarded, one forwarded although its user had left, one
// forwarded twice, one record that is no signal of the input, and a
// transaction left open on the cohort topic. Its changelog lacks one user,
// has a wrong state for another, a late-leave window that covers the
// leaked signal, and two that cover none (one covers a signal forwarded
// rightly after a rejoin).
func TestVerifyFindsDamage(t *testing.T) {
	brokers := cluster(t)
	set := newSet(t, brokers, "damaged")
	cl := newClient(t, brokers)
	produceHandInput(t, cl, set)
	var fwd []uint64
	for _, seq := range expectedSeqs() {
		if seq != 13 { // lost
			fwd = append(fwd, seq)
		}
	}
	fwd = append(fwd, 9, 0) // 9 leaked (the clamp), 0 twice
	forward(t, cl, set, fwd...)
	changelog(t, cl, set, 1, [][2]float64{{10, 30}})
	changelog(t, cl, set, 2, [][2]float64{{10, 0}}, [2]float64{10, 11})  // nothing of user 2 leaked in it
	changelog(t, cl, set, 3, [][2]float64{{10, 20}}, [2]float64{20, 25}) // wrong state; covers the leaked signal 9
	changelog(t, cl, set, 4, [][2]float64{{10, 20}}, [2]float64{10, 26}) // covers signal 10, rightly forwarded after the rejoin
	// User 7 has no record.
	if err := cl.ProduceSync(testCtx(t), &kgo.Record{Topic: string(set.Cohort), Partition: 0, Value: []byte("hello")}).FirstErr(); err != nil {
		t.Fatal(err)
	}

	txn := newClient(t, brokers, kgo.TransactionalID("hanging"))
	if err := txn.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	open := signalRecord(set, handSignals[12])
	open.Topic, open.Partition = string(set.Cohort), 1
	if err := txn.ProduceSync(testCtx(t), open).FirstErr(); err != nil {
		t.Fatal(err)
	}

	rep, err := Verify(testCtx(t), brokers, set, &VerifyOptions{Grace: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	got := []int{rep.Forwarded, rep.Expected, rep.Duplicates, rep.Lost, rep.Leaked, rep.Unknown, rep.Hanging}
	want := []int{13, 11, 1, 1, 1, 1, 1}
	if !slices.Equal(got, want) {
		t.Fatalf("forwarded, expected, duplicates, lost, leaked, unknown, hanging = %v, want %v\n%s", got, want, rep.Details())
	}
	if !slices.Equal(rep.LostIDs, []uint64{13}) || !slices.Equal(rep.LeakedIDs, []uint64{9}) || !slices.Equal(rep.DuplicateIDs, []uint64{0}) {
		t.Fatalf("lost %v, leaked %v, duplicated %v", rep.LostIDs, rep.LeakedIDs, rep.DuplicateIDs)
	}
	changelogGot := []int{rep.ChangelogUsers, rep.ChangelogMismatches, rep.LateLeaveWindows, rep.SpuriousLateLeaves}
	if want := []int{4, 2, 3, 2}; !slices.Equal(changelogGot, want) || !slices.Equal(rep.MismatchedUsers, []uint64{3, 7}) {
		t.Fatalf("changelog users, mismatches, windows, spurious = %v (%v), want %v ([3 7])", changelogGot, rep.MismatchedUsers, want)
	}
	if rep.Damage() != 5 || rep.Details() == "" {
		t.Fatalf("damage %d, details %q", rep.Damage(), rep.Details())
	}
	if err := txn.EndTransaction(testCtx(t), kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
}

// TestProduceThenVerify produces a plan and checks, with an empty cohort
// topic, that the verifier finds every signal and command of the plan and
// expects the signals a leave does not cover.
func TestProduceThenVerify(t *testing.T) {
	brokers := cluster(t)
	set := newSet(t, brokers, "plan")
	plan, err := NewPlan(Config{Seed: 9, Users: 50, Signals: 3000, ValueSize: 32, LeavePct: 20, RejoinPct: 6, Rate: 20000})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...)) // the default partitioner, as Produce requires
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	var calls []Progress
	start := time.Now()
	final, err := Produce(testCtx(t), cl, set, plan, func(p Progress) { calls = append(calls, p) })
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 140*time.Millisecond {
		t.Errorf("3000 signals at 20000/s took %v", took)
	}
	if final.Phase != PhaseDone || final.Signals != 3000 || final.Acked != 3000 || final.Commands != len(plan.Commands) {
		t.Fatalf("final progress %+v", final)
	}
	if len(calls) == 0 || calls[len(calls)-1] != final {
		t.Fatalf("progress calls %v, want the last to be %v", calls, final)
	}

	rep, err := Verify(testCtx(t), brokers, set, &VerifyOptions{Grace: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if rep.SignalsIn != 3000 || rep.Commands != len(plan.Commands) || rep.Refused != 0 || rep.Users != plan.Leavers() || rep.Misrouted != 0 {
		t.Fatalf("report %+v; plan has %d commands and %d leavers", rep, len(plan.Commands), plan.Leavers())
	}
	if rep.Expected == 0 || rep.Expected == 3000 || rep.Lost != rep.Expected || rep.Leaked != 0 || rep.Forwarded != 0 {
		t.Fatalf("report %+v", rep)
	}

	// The commands carry the plan's request ids, in plan order per user.
	var ids []string
	cons := newClient(t, brokers, kgo.ConsumeTopics(string(set.Commands)), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	for len(ids) < len(plan.Commands) {
		fs := cons.PollFetches(testCtx(t))
		if err := fs.Err0(); err != nil {
			t.Fatal(err)
		}
		fs.EachRecord(func(r *kgo.Record) {
			c, err := topics.DecodeCommand(r.Key, r.Value)
			if err != nil || !c.HasAt {
				t.Fatalf("command %q: %v", r.Value, err)
			}
			ids = append(ids, c.RequestID)
		})
	}
	for i := range plan.Commands {
		if !slices.Contains(ids, fmt.Sprint(i)) {
			t.Fatalf("no command with request_id %d", i)
		}
	}
}

func reflectEqual(a, b Report) bool {
	return fmt.Sprintf("%+v", a) == fmt.Sprintf("%+v", b)
}
