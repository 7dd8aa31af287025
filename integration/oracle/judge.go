package oracle

import (
	"cmp"
	"errors"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Defaults of Config.
const (
	// DefaultMaxFutureSkew is the processor's default --max-future-skew.
	DefaultMaxFutureSkew = 5 * time.Second
	// DefaultMaxMessageBytes is Kafka's default max.message.bytes.
	DefaultMaxMessageBytes = 1048588
	// sizeSlack is how close to the cohort topic's max.message.bytes a
	// valid signal may come before the oracle also accepts it dead-lettered
	// as record_too_large (S3): how the processor's producer frames and
	// compresses a batch is its own business.
	sizeSlack = 64 << 10
)

// Config tells a Judge about the run it judges.
type Config struct {
	// Topics names the run's topics; the DLQ's source headers are
	// matched against them.
	Topics Topics
	// Partitions of the commands topic and of every input (they are
	// equal): rules C2 and S2 route by murmur2 modulo this.
	Partitions int32
	// Earlier are the partition counts the commands and the inputs had
	// before they grew to Partitions during the run (docs/operations.md,
	// "Growing the topics"). A record in its key's partition under an earlier
	// count was routed right for the layout it was written under: a
	// processor judged it there under that count, or, running under a
	// later one, as misrouted (C2, S2). A signal is judged at its
	// re-published copy when one exists, else where it is. A command
	// too, unless a changelog record of its user follows it where it is
	// (the processor applied it there, and its copies changed nothing
	// after it, rule C5). A misrouted record's copy may be in its key's
	// partition under any of the counts. Empty: the counts never
	// changed.
	Earlier []int32
	// ChangelogGrew says the changelog's partition count grew during
	// the run: a user's records may be in several of its partitions, and
	// are ordered by their commands' partition count, then offset
	// (docs/client.md, "Record formats").
	ChangelogGrew bool
	// MaxFutureSkew is the processors' --max-future-skew (rule C4).
	// Default DefaultMaxFutureSkew.
	MaxFutureSkew time.Duration
	// CohortMaxMessageBytes is the max.message.bytes of the routes'
	// outputs (rule S3; the smallest, when they differ). Default
	// DefaultMaxMessageBytes.
	CohortMaxMessageBytes int
}

// Judge judges one run from its records, which the caller hands it topic by
// topic: each topic's records in offset order within each partition
// (partitions may interleave, and topics may come in any order). It keeps
// a digest of each record, not the record: 5 to 40 bytes for a numbered
// signal (compact.go), a few hundred for any other. Report applies the
// rules.
//
// A Judge is not safe for concurrent use.
type Judge struct {
	cfg Config

	commands  []commandRecord
	paths     []*path                // one per route, Config.Topics.routes() order
	sigExpect []deadLetter           // signals the rules dead-letter
	sigRoute  []misrouted            // signals found outside their key's partition
	sigMoved  []movedSignal          // signals in their key's partition under an earlier count only
	copies    map[copyKey][]int32    // partitions where re-published copies were found, by where they came from
	dlq       map[source][]dlqRecord // DLQ records by the source they name
	dlqCount  int
	changelog map[uint64][]changelogEntry
	badKeys   []string // changelog records whose key is no user id
	// sealed is the users' final state once Seal was called: every
	// command is in.
	sealed map[uint64]*member
}

// path is what the Judge keeps of one route: its input's signals and its
// output's records. A signal is judged on each route it was written to,
// against the same model and the same changelog.
type path struct {
	in, out  string
	table    seqTable // numbered signals that reach rule S5 alone (compact.go)
	signals  map[signalID]*signal
	cohort   map[signalID]int    // output records per signal
	cohortAt map[signalID]pos    // where each was first seen, for examples
	cohortSq map[signalID]seqKey // of the numbered ones, to find their signal in table
}

// Errors of NewJudge.
var (
	// ErrPartitions: Config.Partitions is below 1.
	ErrPartitions = errors.New("oracle: Partitions must be at least 1")
	// ErrTopics: a topic name is empty, or two are the same.
	ErrTopics = errors.New("oracle: the topic names must be set and distinct")
)

// NewJudge returns a Judge for a run described by cfg.
func NewJudge(cfg Config) (*Judge, error) {
	if cfg.Partitions < 1 || slices.ContainsFunc(cfg.Earlier, func(n int32) bool { return n < 1 }) {
		return nil, ErrPartitions
	}
	names := cfg.Topics.names()
	for i, n := range names {
		if n == "" || slices.Contains(names[:i], n) {
			return nil, ErrTopics
		}
	}
	if cfg.MaxFutureSkew <= 0 {
		cfg.MaxFutureSkew = DefaultMaxFutureSkew
	}
	if cfg.CohortMaxMessageBytes <= 0 {
		cfg.CohortMaxMessageBytes = DefaultMaxMessageBytes
	}
	j := &Judge{
		cfg:       cfg,
		copies:    make(map[copyKey][]int32),
		dlq:       make(map[source][]dlqRecord),
		changelog: make(map[uint64][]changelogEntry),
	}
	for _, r := range cfg.Topics.routes() {
		j.paths = append(j.paths, &path{in: r.Signals, out: r.Cohort,
			signals: make(map[signalID]*signal), cohort: make(map[signalID]int), cohortAt: make(map[signalID]pos),
			cohortSq: make(map[signalID]seqKey)})
	}
	return j, nil
}

// source names a record of an input topic, as a DLQ record's headers do.
type source struct {
	topic string
	at    pos
}

func (s source) String() string { return s.topic + " " + s.at.String() }

// deadLetter is an input record the rules send to the DLQ.
type deadLetter struct {
	src    source
	reason string // what the rules say; reasonKey and reasonCommandValue stand for classes
	sha    string // hex SHA-256 of its value
	what   string // the record, for a finding
}

// misrouted is an input record outside its key's partition (C2, S2).
type misrouted struct {
	src    source
	rights []int32 // its key's partitions, under Partitions and each earlier count
	what   string
}

// movedSignal is a signal record in its key's partition under an earlier
// count, not under Partitions (Config.Earlier): judged at its copy when
// one exists, else where it is.
type movedSignal struct {
	src    source
	others []int32 // its key's other partitions, where a copy may be
	skew   bool    // where it is, it goes to the DLQ (S4)
	sha    string
	what   string
}

// copyKey is where a re-published copy says it came from.
type copyKey struct {
	topic string
	from  string // "<partition>/<offset>"
}

// dlqRecord is what the oracle keeps of a DLQ record.
type dlqRecord struct {
	reason, originalReason, originalSHA string
}

// signal is what the oracle keeps of one signal (all its records).
type signal struct {
	user     uint64
	eventNs  int64
	first    pos   // where it was first read
	eligible []pos // its records that reached rule S5
	// moved are its records in their key's partition under an earlier
	// count only (Config.Earlier): each reached rule S5 where it is
	// unless it was re-published or goes to the DLQ.
	moved []movedSignal
	gated bool // marked ExpectGated
	// mayBeTooLarge: close enough to the cohort topic's limit that rule
	// S3 may send it to the DLQ instead; sha is its value's SHA-256 then.
	mayBeTooLarge bool
	sha           string
	// seq is set when the signal's value is numbered: its records may
	// be in path.table too.
	seq    seqKey
	hasSeq bool
}

// fate is what the rules make of a command record before the model sees it.
type fate uint8

const (
	toModel fate = iota + 1 // reaches rule C5
	toDLQ                   // C1, C3 or C4
	toCopy                  // C2: re-published, not applied here
)

// commandRecord is the digest of one commands record.
type commandRecord struct {
	at     pos
	fate   fate
	reason string  // toDLQ
	rights []int32 // toCopy
	// moved: the record is in its key's partition under an earlier
	// count only, and these are the key's other partitions. With a copy
	// in one, it is re-published (as toCopy); with none, its fate holds.
	moved    []int32
	cmd      command
	boundary uint64
	sha      string
	what     string
}

// changelogEntry is one changelog record of a user.
type changelogEntry struct {
	at  pos
	rec changelogRecord
	err error
}

// Seal tells the Judge that every record of the commands topic was
// handed to it: each user's final episodes are known, so a numbered
// signal that lies in none of them is kept in 5 bytes from then on, not
// 18 (compact.go). AddCommand panics after Seal. When the topics grew
// (Config.Earlier), the changelog must be in too: it says where a moved
// command took effect (applyCommands). Verify reads the commands, the DLQ
// and the changelog first and seals.
func (j *Judge) Seal() {
	j.sealed = j.applyCommands(&Report{})
}

// AddCommand takes a record of the commands topic. It panics after Seal.
func (j *Judge) AddCommand(r Record) {
	if j.sealed != nil {
		panic("oracle: AddCommand after Seal")
	}
	c := commandRecord{at: pos{r.Partition, r.Offset}, sha: sha256Hex(r.Value),
		what: "command " + j.cfg.Topics.Commands + " " + pos{r.Partition, r.Offset}.String() + " key " + quoteKey(r.Key)}
	user, ok := parseUserID(r.Key)
	switch {
	case !ok:
		c.fate, c.reason = toDLQ, reasonKey
	case !j.routedRight(r.Key, r.Partition):
		c.fate, c.rights = toCopy, j.rights(r.Key)
	default:
		c.moved = j.moved(r.Key, r.Partition)
		cmd, reason := decodeCommand(user, r.Value)
		if reason != "" {
			c.fate, c.reason = toDLQ, reasonCommandValue
			break
		}
		if c.boundary, reason = boundaryOf(cmd, r.Timestamp, j.cfg.MaxFutureSkew); reason != "" {
			c.fate, c.reason = toDLQ, reason
			break
		}
		c.fate, c.cmd = toModel, cmd
	}
	if from, ok := r.header(headerMisroutedFrom); ok {
		j.copies[copyKey{j.cfg.Topics.Commands, from}] = append(j.copies[copyKey{j.cfg.Topics.Commands, from}], r.Partition)
	}
	j.commands = append(j.commands, c)
}

// AddSignal takes a record of the signals topic (the first route's input).
func (j *Judge) AddSignal(r Record) { j.AddRouteSignal(0, r) }

// AddRouteSignal takes a record of route i's input: 0 is the first route
// (Topics.Signals), i ≥ 1 is Topics.Routes[i-1]. It panics on another i.
func (j *Judge) AddRouteSignal(i int, r Record) {
	p := j.paths[i]
	k, numbered := seqKeyOf(r)
	if numbered && j.reachesS5Alone(r) {
		outside := j.sealed != nil && !j.sealed[uint64(k.user)].holds(msToNs(k.ms))
		if p.table.addInput(k, headerOr(r, HeaderExpect) == ExpectGated, outside) {
			return
		}
	}
	id := idOf(r)
	at := pos{r.Partition, r.Offset}
	s := p.signals[id]
	if s == nil {
		s = &signal{first: at, eventNs: eventTime(r), seq: k, hasSeq: numbered}
		p.signals[id] = s
	}
	src := source{p.in, at}
	what := "signal " + src.String() + " key " + quoteKey(r.Key) + " at " + formatNs(eventTime(r))
	if from, ok := r.header(headerMisroutedFrom); ok {
		k := copyKey{p.in, from}
		j.copies[k] = append(j.copies[k], r.Partition)
	}
	expect, _ := r.header(HeaderExpect)
	if expect == ExpectGated {
		s.gated = true
	}
	user, ok := parseUserID(r.Key)
	switch {
	case !ok:
		j.sigExpect = append(j.sigExpect, deadLetter{src: src, reason: reasonKey, sha: sha256Hex(r.Value), what: what})
	case !j.routedRight(r.Key, r.Partition):
		j.sigRoute = append(j.sigRoute, misrouted{src: src, rights: j.rights(r.Key), what: what})
	case partitionOf(r.Key, j.cfg.Partitions) != r.Partition:
		m := movedSignal{src: src, others: j.moved(r.Key, r.Partition), skew: expect == ExpectTimestampSkew, sha: sha256Hex(r.Value), what: what}
		j.sigMoved = append(j.sigMoved, m)
		s.moved = append(s.moved, m)
		if !m.skew && batchBytes(r) > j.cfg.CohortMaxMessageBytes-sizeSlack {
			s.mayBeTooLarge, s.sha = true, m.sha
		}
	case expect == ExpectTimestampSkew:
		j.sigExpect = append(j.sigExpect, deadLetter{src: src, reason: reasonTimestampSkew, sha: sha256Hex(r.Value), what: what})
	default:
		s.eligible = append(s.eligible, at)
		if batchBytes(r) > j.cfg.CohortMaxMessageBytes-sizeSlack {
			s.mayBeTooLarge, s.sha = true, sha256Hex(r.Value)
		}
	}
	if ok {
		s.user = user
	}
}

// reachesS5Alone reports whether the rules leave signal record r to rule
// S5 alone: its key is a user id in its key's partition, it is no
// re-published copy, it carries no chaos.expect but gated, and it is
// far below the outputs' size limit. Such a record needs no digest of its
// own: the table keeps it (compact.go).
func (j *Judge) reachesS5Alone(r Record) bool {
	if _, ok := r.header(headerMisroutedFrom); ok {
		return false
	}
	if e, ok := r.header(HeaderExpect); ok && e != ExpectGated {
		return false
	}
	return partitionOf(r.Key, j.cfg.Partitions) == r.Partition && batchBytes(r) <= j.cfg.CohortMaxMessageBytes-sizeSlack
}

// AddDLQ takes a record of the DLQ topic. Only its headers matter.
func (j *Judge) AddDLQ(r Record) {
	j.dlqCount++
	topic, _ := r.header(headerSourceTopic)
	p, perr := strconv.ParseInt(headerOr(r, headerSourcePartition), 10, 32)
	o, oerr := strconv.ParseInt(headerOr(r, headerSourceOffset), 10, 64)
	if perr != nil || oerr != nil {
		return // names no source; no expectation can be met by it
	}
	src := source{topic, pos{int32(p), o}}
	j.dlq[src] = append(j.dlq[src], dlqRecord{
		reason:         headerOr(r, headerReason),
		originalReason: headerOr(r, headerOriginalReason),
		originalSHA:    headerOr(r, headerOriginalSHA256),
	})
}

// AddCohort takes a record of the cohort topic (the first route's output,
// read_committed).
func (j *Judge) AddCohort(r Record) { j.AddRouteCohort(0, r) }

// AddRouteCohort takes a record of route i's output (read_committed),
// numbered as in AddRouteSignal.
func (j *Judge) AddRouteCohort(i int, r Record) {
	p := j.paths[i]
	k, numbered := seqKeyOf(r)
	if numbered && p.table.addOutput(k) {
		return
	}
	id := idOf(r)
	if p.cohort[id] == 0 {
		p.cohortAt[id] = pos{r.Partition, r.Offset}
		if numbered {
			p.cohortSq[id] = k
		}
	}
	p.cohort[id]++
}

// AddChangelog takes a record of the changelog topic.
func (j *Judge) AddChangelog(r Record) {
	at := pos{r.Partition, r.Offset}
	user, ok := parseUserID(r.Key)
	if !ok {
		j.badKeys = append(j.badKeys, "changelog "+at.String()+" key "+quoteKey(r.Key))
		return
	}
	rec, err := decodeChangelog(r.Value)
	if err == nil && rec.userID != user {
		err = errors.New("user_id " + formatUint(rec.userID) + " differs from its key")
	}
	j.changelog[user] = append(j.changelog[user], changelogEntry{at: at, rec: rec, err: err})
}

func headerOr(r Record, key string) string {
	v, _ := r.header(key)
	return v
}

// quoteKey renders a key for a finding, cut to 40 bytes.
func quoteKey(k []byte) string {
	if k == nil {
		return "null"
	}
	if len(k) > 40 {
		return strconv.Quote(string(k[:40])) + "…"
	}
	return strconv.Quote(string(k))
}

// Report applies the rules to everything the Judge was given and returns
// the verdict. It does not change the Judge.
func (j *Judge) Report() Report {
	rep := Report{DLQ: j.dlqCount}
	members := j.applyCommands(&rep)
	for _, m := range members {
		if eps := m.episodes(); len(eps) > 0 {
			rep.Users++
			rep.Episodes += len(eps)
		}
	}
	for _, d := range j.sigExpect {
		rep.DeadLetters++
		j.checkDeadLetter(&rep, d)
	}
	for _, m := range j.sigRoute {
		rep.Misrouted++
		j.checkCopy(&rep, m)
	}
	for _, m := range j.sigMoved {
		switch {
		case j.hasCopy(m.src, m.others):
			rep.Misrouted++
		case m.skew:
			rep.DeadLetters++
			j.checkDeadLetter(&rep, deadLetter{src: m.src, reason: reasonTimestampSkew, sha: m.sha, what: m.what})
		}
	}
	windows := j.judgeChangelog(&rep, members)
	forwardedIn := make(map[uint64][]int64)
	for _, p := range j.paths {
		for u, ts := range j.judgeSignals(&rep, p, members, windows) {
			forwardedIn[u] = append(forwardedIn[u], ts...)
		}
	}
	j.judgeWindows(&rep, windows, forwardedIn)
	return rep
}

// applyCommands runs the commands through rules C1-C7, per partition in
// offset order, and returns the users' final state.
func (j *Judge) applyCommands(rep *Report) map[uint64]*member {
	cmds := slices.Clone(j.commands)
	slices.SortStableFunc(cmds, func(a, b commandRecord) int {
		return cmp.Or(cmp.Compare(a.at.partition, b.at.partition), cmp.Compare(a.at.offset, b.at.offset))
	})
	members := make(map[uint64]*member)
	src := func(c commandRecord) source { return source{j.cfg.Topics.Commands, c.at} }
	for _, c := range cmds {
		rep.CommandsIn++
		if len(c.moved) > 0 && j.hasCopy(src(c), c.moved) && !j.appliedAt(c) {
			rep.Misrouted++ // re-published under a later count; judged at its copy
			continue
		}
		switch c.fate {
		case toDLQ:
			rep.DeadLetters++
			j.checkDeadLetter(rep, deadLetter{src: src(c), reason: c.reason, sha: c.sha, what: c.what})
		case toCopy:
			rep.Misrouted++
			j.checkCopy(rep, misrouted{src: src(c), rights: c.rights, what: c.what})
		case toModel:
			m := members[c.cmd.userID]
			if m == nil {
				m = &member{}
				members[c.cmd.userID] = m
			}
			switch m.apply(c.cmd.op, c.boundary, c.cmd.requestID) {
			case changed, unchanged:
				rep.Applied++
			case duplicate:
				rep.DuplicateCommands++
			case refused:
				rep.Refused++
				rep.DeadLetters++
				j.checkDeadLetter(rep, deadLetter{src: src(c), reason: reasonRejoinBeforeLeave, sha: c.sha, what: c.what})
			case full:
				rep.Refused++
				rep.DeadLetters++
				j.checkDeadLetter(rep, deadLetter{src: src(c), reason: reasonHistoryFull, sha: c.sha, what: c.what})
			}
		}
	}
	return members
}

// reasonFits reports whether a DLQ record gives the reason want; a
// truncated copy (record_too_large) gives it in cohortgate.original.reason.
func reasonFits(want string, d dlqRecord) bool {
	got := d.reason
	if got == reasonTooLarge {
		got = d.originalReason
		if want == reasonTooLarge {
			return got == "" // a valid signal too large to forward
		}
	}
	switch want {
	case reasonKey:
		return strings.HasPrefix(got, "key_")
	case reasonCommandValue:
		return slices.Contains([]string{reasonCommandJSON, reasonCommandOp, reasonCommandUserMissing,
			reasonCommandUserInvalid, reasonCommandUserMismatch, reasonCommandAtNs, reasonCommandRequestID}, got)
	}
	return got == want
}

// deadLettered reports whether the DLQ holds a record for d with a fitting
// reason (and, when truncated, the original's SHA-256), or says what it
// holds instead.
func (j *Judge) deadLettered(d deadLetter) (bool, string) {
	recs := j.dlq[d.src]
	if len(recs) == 0 {
		return false, "no DLQ record names it"
	}
	var got []string
	for _, r := range recs {
		switch {
		case !reasonFits(d.reason, r):
			got = append(got, "reason "+r.reason+" (original "+r.originalReason+")")
		case r.reason == reasonTooLarge && r.originalSHA != d.sha:
			got = append(got, "record_too_large with sha256 "+r.originalSHA+", want "+d.sha)
		default:
			return true, ""
		}
	}
	return false, "DLQ has " + strings.Join(got, "; ")
}

func (j *Judge) checkDeadLetter(rep *Report, d deadLetter) {
	if ok, why := j.deadLettered(d); !ok {
		rep.note(&rep.PoisonNotDLQd, "poison not dead-lettered", "%s: want reason %s: %s", d.what, d.reason, why)
	}
}

func (j *Judge) checkCopy(rep *Report, m misrouted) {
	if j.hasCopy(m.src, m.rights) {
		return
	}
	rep.note(&rep.MisroutedNotRepublished, "misrouted not re-published", "%s: no copy in partition %s with %s %s",
		m.what, joinPartitions(m.rights), headerMisroutedFrom, m.src.at)
}

// hasCopy reports whether a re-published copy of the record at src is in
// one of parts.
func (j *Judge) hasCopy(src source, parts []int32) bool {
	return slices.ContainsFunc(j.copies[copyKey{src.topic, src.at.String()}], func(p int32) bool { return slices.Contains(parts, p) })
}

// appliedAt reports whether a changelog record of c's user follows c
// where it is: the processor applied it there, under the count it was
// routed by.
func (j *Judge) appliedAt(c commandRecord) bool {
	if c.fate != toModel {
		return false
	}
	at := j.cfg.Topics.Commands + "/" + strconv.Itoa(int(c.at.partition)) + "/" + strconv.FormatInt(c.at.offset, 10)
	return slices.ContainsFunc(j.changelog[c.cmd.userID], func(e changelogEntry) bool { return e.err == nil && e.rec.command == at })
}

// rights returns key's partitions: under Partitions first, then under
// each earlier count (Config.Earlier), without repeats.
func (j *Judge) rights(key []byte) []int32 {
	out := []int32{partitionOf(key, j.cfg.Partitions)}
	for _, n := range j.cfg.Earlier {
		if p := partitionOf(key, n); !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// routedRight reports whether partition p is key's under Partitions or
// an earlier count.
func (j *Judge) routedRight(key []byte, p int32) bool { return slices.Contains(j.rights(key), p) }

// moved returns, for a record in partition p, key's other partitions when
// p is key's under an earlier count only (Config.Earlier), else nil.
func (j *Judge) moved(key []byte, p int32) []int32 {
	rights := j.rights(key)
	if rights[0] == p {
		return nil
	}
	return slices.DeleteFunc(rights, func(q int32) bool { return q == p })
}

// joinPartitions renders partitions for a finding: "3" or "3 or 1".
func joinPartitions(parts []int32) string {
	var b strings.Builder
	for i, p := range parts {
		if i > 0 {
			b.WriteString(" or ")
		}
		b.WriteString(strconv.Itoa(int(p)))
	}
	return b.String()
}

// eligibleOf returns where the records of s that reached rule S5 on
// route p are: those in their key's partition, and those in it under an
// earlier count only that were not re-published (nor dead-lettered).
func (j *Judge) eligibleOf(p *path, s *signal) []pos {
	out := s.eligible
	for _, m := range s.moved {
		if !m.skew && m.src.topic == p.in && !j.hasCopy(m.src, m.others) {
			out = append(slices.Clip(out), m.src.at)
		}
	}
	return out
}
