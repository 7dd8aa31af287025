package workload

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/pkg/membership"
	"github.com/cohortgate/cohortgate/topics"
)

// VerifyOptions tune Verify. The zero value is ready to use.
type VerifyOptions struct {
	// Grace is how long Verify waits for open transactions to end before
	// it counts the partitions still open as hanging. Default 30s.
	Grace time.Duration
	// ReadTimeout bounds the reading of each topic. Default 5m.
	ReadTimeout time.Duration
	// KafkaOpts are added to the options of Verify's clients (after the
	// seed brokers).
	KafkaOpts []kgo.Opt
}

// maxExamples bounds the ids a Report lists per kind of damage.
const maxExamples = 10

// Report is what Verify found. Counts of signals count distinct signal
// ids unless they say records.
type Report struct {
	SignalsIn int // distinct signal ids in the signals topic
	Commands  int // commands applied: decodable, in their key's partition, not refused
	Refused   int // commands the oracle refused as the processor would (rejoin before leave)
	Users     int // users with at least one leave episode
	Episodes  int // leave episodes, open ones included

	Forwarded  int // records in the cohort topic, read_committed
	Expected   int // signal ids that must be forwarded exactly once
	Duplicates int // records in the cohort topic beyond the first of their id
	Lost       int // expected ids never forwarded
	Leaked     int // forwarded ids whose event time lies in a leave episode of their user
	Unknown    int // cohort records that are no signal of the input, or were dead-lettered
	Hanging    int // partitions of the written topics with an open transaction after the grace
	DLQ        int // records in the DLQ topic

	// The changelog, the purge job's input: the latest record of each user.
	ChangelogUsers      int // users with a changelog record
	ChangelogMismatches int // users whose latest record's episodes differ from the oracle's (or who have none)
	LateLeaveWindows    int // late-leave windows in the latest records
	SpuriousLateLeaves  int // of those, windows that hold no leaked signal of the user: false alarms for the purge job

	Misrouted       int // signal records found outside their key's murmur2 partition
	InputDuplicates int // signal ids produced more than once (not counting re-published copies)
	DeadLettered    int // signal ids found in the DLQ, not expected in the cohort topic

	MismatchedUsers                  []uint64 // the first few, ascending
	HangingDetail                    []string
	LostIDs, LeakedIDs, DuplicateIDs []uint64 // the first few of each, ascending
	UnknownValues                    []string
	Took                             time.Duration
}

// Damage is the sum of everything that breaks the promise: duplicates,
// lost, leaked, unknown records and hanging transactions.
func (r Report) Damage() int {
	return r.Duplicates + r.Lost + r.Leaked + r.Unknown + r.Hanging
}

// Details describes the damage with examples, one item per line; empty
// when there is none.
func (r Report) Details() string {
	var b strings.Builder
	list := func(name string, n int, ids []uint64) {
		if n > 0 {
			fmt.Fprintf(&b, "%s %d, e.g. signal ids %v\n", name, n, ids)
		}
	}
	list("duplicates", r.Duplicates, r.DuplicateIDs)
	list("lost", r.Lost, r.LostIDs)
	list("leaked", r.Leaked, r.LeakedIDs)
	if r.Unknown > 0 {
		fmt.Fprintf(&b, "unknown %d, e.g. %q\n", r.Unknown, r.UnknownValues)
	}
	for _, h := range r.HangingDetail {
		fmt.Fprintf(&b, "hanging: %s\n", h)
	}
	if r.ChangelogMismatches > 0 {
		fmt.Fprintf(&b, "changelog: %d users' latest record differs from the oracle's episodes, e.g. users %v\n", r.ChangelogMismatches, r.MismatchedUsers)
	}
	if r.LateLeaveWindows > 0 {
		fmt.Fprintf(&b, "changelog: %d late-leave windows, %d of them spurious (no leaked signal of the user in the window)\n",
			r.LateLeaveWindows, r.SpuriousLateLeaves)
	}
	if r.InputDuplicates > 0 {
		fmt.Fprintf(&b, "input: %d signal ids were produced more than once\n", r.InputDuplicates)
	}
	return b.String()
}

// signal is what the oracle knows of one signal id.
type signal struct {
	user    uint64
	eventNs uint64
	valid   bool  // its key is a user id: the processor gates it (else DLQ)
	copies  int32 // records that are not re-published copies
	seen    int32 // records in the cohort topic
	dlq     bool  // found in the DLQ
}

// Verify reads set's topics on brokers and judges the cohort topic against
// the oracle computed from the input topics. See the package
// documentation; the Report says what is counted. It first waits (up to
// opts.Grace) for open transactions on any topic the processor writes to
// (all five: it re-publishes misrouted input) to end, then reads each topic
// read_committed up to its last stable offset observed then.
func Verify(ctx context.Context, brokers []string, set topics.Set, opts *VerifyOptions) (Report, error) {
	start := time.Now()
	var o VerifyOptions
	if opts != nil {
		o = *opts
	}
	if o.Grace <= 0 {
		o.Grace = 30 * time.Second
	}
	if o.ReadTimeout <= 0 {
		o.ReadTimeout = 5 * time.Minute
	}
	kopts := append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, o.KafkaOpts...)
	cl, err := kgo.NewClient(kopts...)
	if err != nil {
		return Report{}, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)

	var rep Report
	names := []string{string(set.Commands), string(set.Signals), string(set.Cohort), string(set.DLQ), string(set.Changelog)}
	upTo, open, err := openTransactions(ctx, adm, o.Grace, names)
	if err != nil {
		return rep, fmt.Errorf("workload: verify: %w", err)
	}
	rep.Hanging, rep.HangingDetail = len(open), open

	read := func(topic topics.Topic, fn func(*kgo.Record)) error {
		rctx, cancel := context.WithTimeout(ctx, o.ReadTimeout)
		defer cancel()
		if err := readTopic(rctx, kopts, string(topic), upTo[string(topic)], fn); err != nil {
			return fmt.Errorf("workload: verify: %w", err)
		}
		return nil
	}

	episodes, err := applyCommands(ctx, read, set, int32(len(upTo[string(set.Commands)])), &rep)
	if err != nil {
		return rep, err
	}
	for _, eps := range episodes {
		rep.Episodes += len(eps)
	}
	rep.Users = len(episodes)

	sigs := make(map[uint64]*signal)
	kp := newKeyPartition()
	nparts := int32(len(upTo[string(set.Signals)]))
	if err := read(set.Signals, func(r *kgo.Record) {
		seq, err := ParseSignalID(r.Value)
		if err != nil {
			return // not ours; the processor forwards it or not, we do not judge it
		}
		s := sigs[seq]
		if s == nil {
			s = &signal{eventNs: uint64(r.Timestamp.UnixNano())}
			user, err := topics.ParseUserID(r.Key)
			s.user, s.valid = user, err == nil
			sigs[seq] = s
		}
		republished := hasHeader(r, topics.HeaderMisroutedFrom)
		if s.valid && kp.of(r.Key, nparts) != r.Partition {
			rep.Misrouted++
		}
		if !republished {
			s.copies++
		}
	}); err != nil {
		return rep, err
	}
	rep.SignalsIn = len(sigs)

	if err := read(set.DLQ, func(r *kgo.Record) {
		rep.DLQ++
		if src, _ := header(r, topics.HeaderSourceTopic); src != string(set.Signals) {
			return
		}
		if seq, err := ParseSignalID(r.Value); err == nil {
			if s := sigs[seq]; s != nil {
				s.dlq = true
			}
		}
	}); err != nil {
		return rep, err
	}

	if err := read(set.Cohort, func(r *kgo.Record) {
		rep.Forwarded++
		seq, err := ParseSignalID(r.Value)
		s := sigs[seq]
		if err != nil || s == nil || s.dlq {
			rep.Unknown++
			if len(rep.UnknownValues) < maxExamples {
				rep.UnknownValues = append(rep.UnknownValues, truncate(r.Value, 40))
			}
			return
		}
		s.seen++
	}); err != nil {
		return rep, err
	}

	latest := make(map[uint64]topics.MemberRecord)
	if err := read(set.Changelog, func(r *kgo.Record) {
		user, err := topics.ParseUserID(r.Key)
		if err != nil {
			return
		}
		if m, err := topics.DecodeMemberRecord(r.Value); err == nil {
			latest[user] = m // records of a user are in one partition, read in offset order
		}
	}); err != nil {
		return rep, err
	}

	judge(sigs, episodes, &rep)
	judgeChangelog(latest, sigs, episodes, &rep)
	rep.Took = time.Since(start)
	return rep, nil
}

// judge compares what was seen with what the oracle expects.
func judge(sigs map[uint64]*signal, episodes map[uint64][]membership.Episode, rep *Report) {
	ids := make([]uint64, 0, len(sigs))
	for seq := range sigs {
		ids = append(ids, seq)
	}
	slices.Sort(ids)
	example := func(dst []uint64, seq uint64) []uint64 {
		if len(dst) < maxExamples {
			dst = append(dst, seq)
		}
		return dst
	}
	for _, seq := range ids {
		s := sigs[seq]
		if s.copies > 1 {
			rep.InputDuplicates++
		}
		if s.dlq {
			rep.DeadLettered++
		}
		if s.seen > 1 {
			rep.Duplicates += int(s.seen - 1)
			rep.DuplicateIDs = example(rep.DuplicateIDs, seq)
		}
		if !s.valid || s.dlq {
			continue // never forwarded; a forwarded copy was counted unknown
		}
		dropped := inEpisode(episodes[s.user], s.eventNs)
		switch {
		case !dropped && s.seen == 0:
			rep.Expected++
			rep.Lost++
			rep.LostIDs = example(rep.LostIDs, seq)
		case !dropped:
			rep.Expected++
		case s.seen > 0:
			rep.Leaked++
			rep.LeakedIDs = example(rep.LeakedIDs, seq)
		}
	}
}

// judgeChangelog compares the latest changelog record of each user with
// the oracle's episodes, and checks each late-leave window against the
// signals actually leaked: a window with none in it sends the purge job
// after contributions that were never made.
func judgeChangelog(latest map[uint64]topics.MemberRecord, sigs map[uint64]*signal, episodes map[uint64][]membership.Episode, rep *Report) {
	rep.ChangelogUsers = len(latest)
	users := make([]uint64, 0, len(latest)+len(episodes))
	for u := range latest {
		users = append(users, u)
	}
	for u := range episodes {
		if _, ok := latest[u]; !ok {
			users = append(users, u)
		}
	}
	slices.Sort(users)
	leakedNs := make(map[uint64][]uint64) // user → event times of leaked signals
	for _, s := range sigs {
		if s.seen > 0 && s.valid && !s.dlq && inEpisode(episodes[s.user], s.eventNs) {
			leakedNs[s.user] = append(leakedNs[s.user], s.eventNs)
		}
	}
	for _, u := range users {
		m, ok := latest[u]
		if !ok || !slices.Equal(changelogEpisodes(m), episodes[u]) {
			rep.ChangelogMismatches++
			if len(rep.MismatchedUsers) < maxExamples {
				rep.MismatchedUsers = append(rep.MismatchedUsers, u)
			}
		}
		for _, w := range m.LateLeaves {
			rep.LateLeaveWindows++
			leaked := slices.ContainsFunc(leakedNs[u], func(ns uint64) bool {
				return w.LeftAtNs <= ns && ns <= w.ForwardedThroughNs
			})
			if !leaked {
				rep.SpuriousLateLeaves++
			}
		}
	}
}

// changelogEpisodes returns the episodes a changelog record describes,
// closed ones then the open one, as membership.Member.Episodes does.
func changelogEpisodes(m topics.MemberRecord) []membership.Episode {
	var out []membership.Episode
	for _, e := range m.History {
		out = append(out, membership.Episode{LeftAtNs: e.LeftAtNs, RejoinedAtNs: e.RejoinedAtNs})
	}
	if m.Status == "left" && m.LeftAtNs != nil {
		out = append(out, membership.Episode{LeftAtNs: *m.LeftAtNs, RejoinedAtNs: membership.OpenEnd})
	}
	return out
}

func inEpisode(eps []membership.Episode, ns uint64) bool {
	for _, e := range eps {
		if e.Contains(ns) {
			return true
		}
	}
	return false
}

// applyCommands reads the commands topic and applies, per partition in
// offset order, every command the processor would apply, to a membership
// store on an in-memory file system. It returns every user's episodes.
func applyCommands(ctx context.Context, read func(topics.Topic, func(*kgo.Record)) error, set topics.Set, nparts int32, rep *Report) (map[uint64][]membership.Episode, error) {
	byPart := make(map[int32][]*kgo.Record)
	if err := read(set.Commands, func(r *kgo.Record) {
		byPart[r.Partition] = append(byPart[r.Partition], r)
	}); err != nil {
		return nil, err
	}
	store, err := membership.Open("oracle", &membership.Options{FS: vfs.NewMem(), NoSync: true})
	if err != nil {
		return nil, fmt.Errorf("workload: oracle store: %w", err)
	}
	defer store.Close()
	kp := newKeyPartition()
	users := make(map[uint64]bool)
	for p := range nparts {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		rs := byPart[p]
		slices.SortFunc(rs, func(a, b *kgo.Record) int { return int(a.Offset - b.Offset) })
		for _, r := range rs {
			user, applied, err := applyCommand(store, kp, nparts, r)
			switch {
			case errors.Is(err, membership.ErrRejoinBeforeLeave):
				rep.Refused++
			case err != nil:
				return nil, err
			case applied:
				rep.Commands++
				users[user] = true
			}
		}
	}
	episodes := make(map[uint64][]membership.Episode, len(users))
	for u := range users {
		m, err := store.Member(u)
		if err != nil {
			return nil, fmt.Errorf("workload: oracle store: %w", err)
		}
		if eps := m.Episodes(nil); len(eps) > 0 {
			episodes[u] = eps
		}
	}
	return episodes, nil
}

// applyCommand applies r as the processor's commands side does and returns
// the user it applied to. It applies nothing, with a nil error, when the
// processor would not: a bad key or command (dead-lettered), or a record
// outside its key's partition (applied where it is re-published). A
// refused rejoin is an error wrapping membership.ErrRejoinBeforeLeave.
func applyCommand(store *membership.Store, kp keyPartition, nparts int32, r *kgo.Record) (user uint64, applied bool, err error) {
	if _, err := topics.ParseUserID(r.Key); err != nil {
		return 0, false, nil
	}
	if kp.of(r.Key, nparts) != r.Partition {
		return 0, false, nil
	}
	cmd, err := topics.DecodeCommand(r.Key, r.Value)
	if err != nil {
		return 0, false, nil
	}
	at := cmd.AtNs
	if !cmd.HasAt {
		at = uint64(r.Timestamp.UnixNano())
	}
	if cmd.Op == topics.Rejoin {
		_, err = store.Rejoin(cmd.UserID, at)
	} else {
		_, err = store.Leave(cmd.UserID, at)
	}
	if err != nil {
		if errors.Is(err, membership.ErrRejoinBeforeLeave) {
			return 0, false, err
		}
		return 0, false, fmt.Errorf("workload: oracle: %s of user %d (commands partition %d offset %d): %w",
			cmd.Op, cmd.UserID, r.Partition, r.Offset, err)
	}
	return cmd.UserID, true, nil
}

// keyPartition is Kafka's default partitioner (murmur2 of the key), as
// franz-go implements it.
type keyPartition struct{ p kgo.TopicPartitioner }

func newKeyPartition() keyPartition {
	return keyPartition{kgo.StickyKeyPartitioner(nil).ForTopic("")}
}

func (k keyPartition) of(key []byte, n int32) int32 {
	if n <= 0 {
		return -1
	}
	return int32(k.p.Partition(&kgo.Record{Key: key}, int(n)))
}

func hasHeader(r *kgo.Record, key string) bool {
	_, ok := header(r, key)
	return ok
}

func header(r *kgo.Record, key string) (string, bool) {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value), true
		}
	}
	return "", false
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}
