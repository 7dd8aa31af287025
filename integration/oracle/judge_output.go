package oracle

import (
	"cmp"
	"maps"
	"slices"
)

// judgeChangelog compares each user's latest changelog record with the
// model, and checks that no window of an earlier record vanishes from a
// later one. It returns the windows of each user's latest record.
func (j *Judge) judgeChangelog(rep *Report, members map[uint64]*member) map[uint64][]window {
	for _, k := range j.badKeys {
		rep.note(&rep.ChangelogMismatches, "changelog mismatches", "%s: not a user id", k)
	}
	users := slices.Collect(maps.Keys(j.changelog))
	for u := range members {
		if _, ok := j.changelog[u]; !ok {
			users = append(users, u)
		}
	}
	slices.Sort(users)
	windows := make(map[uint64][]window)
	mismatch := func(format string, args ...any) {
		rep.note(&rep.ChangelogMismatches, "changelog mismatches", format, args...)
	}
	for _, u := range users {
		entries, m := j.changelog[u], members[u]
		if len(entries) == 0 {
			// members holds exactly the users with a command that reached
			// rule C5: each must have a record.
			mismatch("user %d: no changelog record; the rules say %s", u, describeEpisodes(m.episodes()))
			continue
		}
		rep.ChangelogUsers++
		if parts := partitionsOf(entries); len(parts) > 1 {
			if !j.cfg.ChangelogGrew || slices.ContainsFunc(entries, func(e changelogEntry) bool { return e.err == nil && !e.rec.order.ok }) {
				mismatch("user %d: changelog records in partitions %v: which is the latest?", u, parts)
				continue
			}
			entries = byCommand(entries)
		}
		last := entries[len(entries)-1]
		switch bad := slices.IndexFunc(entries, func(e changelogEntry) bool { return e.err != nil }); {
		case last.err != nil:
			mismatch("user %d: latest changelog record %s does not decode: %v", u, last.at, last.err)
		case !last.rec.sameState(m):
			mismatch("user %d: latest changelog record %s says %s; the rules say %s",
				u, last.at, describeEpisodes(last.rec.episodes()), describeEpisodes(m.episodes()))
		case bad >= 0:
			mismatch("user %d: changelog record %s does not decode: %v", u, entries[bad].at, entries[bad].err)
		}
		if last.err == nil {
			windows[u] = last.rec.windows
			rep.Windows += len(last.rec.windows)
		}
		j.missingWindows(rep, u, entries)
	}
	return windows
}

// byCommand orders a user's records from several changelog partitions
// (it grew) by their commands: the commands' partition count, then the
// offset; records of one command, and those that do not decode, stay in
// the order they were read in.
func byCommand(entries []changelogEntry) []changelogEntry {
	out := slices.Clone(entries)
	slices.SortStableFunc(out, func(a, b changelogEntry) int {
		if a.err != nil || b.err != nil {
			return 0
		}
		return cmp.Or(cmp.Compare(a.rec.order.partitions, b.rec.order.partitions), cmp.Compare(a.rec.order.offset, b.rec.order.offset))
	})
	return out
}

func partitionsOf(entries []changelogEntry) []int32 {
	var parts []int32
	for _, e := range entries {
		if !slices.Contains(parts, e.at.partition) {
			parts = append(parts, e.at.partition)
		}
	}
	return parts
}

// missingWindows checks promise 2's "once recorded, a window is in every
// later changelog record of that user": each window of a record must be
// covered by every later record. A record that restates an earlier
// command's record (the changelog is at least once: the same command's
// record written again after a crash) is let off, unless it is the latest,
// which is what the compacted topic keeps.
func (j *Judge) missingWindows(rep *Report, user uint64, entries []changelogEntry) {
	type seenWindow struct {
		w    window
		from pos
	}
	var seen []seenWindow
	flagged := make(map[window]bool)
	commands := make(map[string]bool)
	for i, e := range entries {
		if e.err != nil {
			continue
		}
		restates := i < len(entries)-1 && e.rec.command != "" && commands[e.rec.command]
		for _, s := range seen {
			if restates || flagged[s.w] || slices.ContainsFunc(e.rec.windows, func(x window) bool { return x.covers(s.w) }) {
				continue
			}
			flagged[s.w] = true
			rep.note(&rep.MissingWindows, "missing windows", "user %d: window %v of changelog %s is not covered by changelog %s",
				user, s.w, s.from, e.at)
		}
		if e.rec.command != "" {
			commands[e.rec.command] = true
		}
		for _, w := range e.rec.windows {
			if !slices.ContainsFunc(seen, func(s seenWindow) bool { return s.w == w }) {
				seen = append(seen, seenWindow{w, e.at})
			}
		}
	}
}

// judgeSignals judges every signal of route p against the model (S1-S5)
// and p's output, and returns, per user, the event times of the signals
// forwarded inside a final episode (late or leaked). A window is judged
// against the signals of every route: one leave gates them all.
//
// The signals kept in full come first, in the order they were first read,
// then those of the table in number order. A signal with records in both
// is judged once, with all of them.
func (j *Judge) judgeSignals(rep *Report, p *path, members map[uint64]*member, windows map[uint64][]window) map[uint64][]int64 {
	// Output records kept in full whose signal is in the table (met
	// before it, or while the table did not know it yet).
	extra := make(map[uint64]int)
	var unknown []signalID
	for id, n := range p.cohort {
		if p.signals[id] != nil {
			continue
		}
		if k, ok := p.cohortSq[id]; ok {
			if _, _, match := p.table.match(k); match {
				extra[k.seq] += n
				continue
			}
		}
		unknown = append(unknown, id)
	}

	ids := slices.Collect(maps.Keys(p.signals))
	slices.SortFunc(ids, func(a, b signalID) int {
		pa, pb := p.signals[a].first, p.signals[b].first
		return cmp.Or(cmp.Compare(pa.partition, pb.partition), cmp.Compare(pa.offset, pb.offset))
	})
	forwardedIn := make(map[uint64][]int64)
	joined := make(map[uint64]bool) // numbers of table signals judged with their full twin
	rep.SignalsIn += len(p.signals) + p.table.present
	for _, id := range ids {
		s := p.signals[id]
		v := signalVerdict{user: s.user, eventNs: s.eventNs, eligible: len(j.eligibleOf(p, s)) > 0, gated: s.gated, seen: p.cohort[id],
			what: func() string {
				return "signal " + p.in + " " + s.first.String() + " of user " + formatUint(s.user) + " at " + formatNs(s.eventNs)
			}}
		if s.mayBeTooLarge {
			v.tooLarge = func() bool { return j.tooLargeDeadLettered(p, s) }
		}
		if s.hasSeq {
			if c, i, ok := p.table.match(s.seq); ok {
				joined[s.seq.seq] = true
				rep.SignalsIn--
				v.eligible = true
				v.gated = v.gated || c.state[i]&slotGated != 0
				v.seen += p.table.outputs(c, i, s.seq.seq) + extra[s.seq.seq]
			}
		}
		j.judgeSignal(rep, v, members, windows, forwardedIn)
	}
	p.table.each(func(seq uint64, c *seqChunk, i int) {
		if joined[seq] {
			return
		}
		v := signalVerdict{eligible: true, gated: c.state[i]&slotGated != 0, seen: p.table.outputs(c, i, seq) + extra[seq],
			outside: c.state[i]&slotOutside != 0}
		if v.outside {
			v.what = func() string { return "signal " + p.in + " number " + formatUint(seq) }
		} else {
			side := p.table.side[seq]
			v.user, v.eventNs = uint64(side.user), msToNs(side.ms)
			v.what = func() string {
				return "signal " + p.in + " number " + formatUint(seq) + " of user " + formatUint(v.user) + " at " + formatNs(v.eventNs)
			}
		}
		j.judgeSignal(rep, v, members, windows, forwardedIn)
	})

	slices.SortFunc(unknown, func(a, b signalID) int {
		pa, pb := p.cohortAt[a], p.cohortAt[b]
		return cmp.Or(cmp.Compare(pa.partition, pb.partition), cmp.Compare(pa.offset, pb.offset))
	})
	for _, id := range unknown {
		rep.Forwarded += p.cohort[id]
		rep.Unknown += p.cohort[id]
		rep.example("unknown", "%s record %s is no signal of its input %s", p.out, p.cohortAt[id], p.in)
	}
	return forwardedIn
}

// signalVerdict is what judgeSignal needs of one signal of a route.
type signalVerdict struct {
	user     uint64
	eventNs  int64
	eligible bool // a record of it reached rule S5
	gated    bool // marked ExpectGated
	seen     int  // its output records
	// outside: the Judge was sealed when the signal came, and it lies
	// in no final episode of its user (who, and when, is not kept).
	outside  bool
	what     func() string
	tooLarge func() bool // nil unless rule S3 may have dead-lettered it: whether it did
}

// judgeSignal judges one signal by rule S5 (or S3) and its output
// records, and adds its event time to forwardedIn[user] when it was
// forwarded inside a final episode.
func (j *Judge) judgeSignal(rep *Report, v signalVerdict, members map[uint64]*member, windows map[uint64][]window, forwardedIn map[uint64][]int64) {
	seen := v.seen
	rep.Forwarded += seen
	if !v.eligible {
		if seen > 0 {
			rep.Unknown += seen
			rep.example("unknown", "%s forwarded %d times; the rules dead-letter or re-publish it", v.what(), seen)
		}
		return
	}
	m := members[v.user]
	in := !v.outside && m.holds(v.eventNs)
	if v.gated {
		rep.Gated++
	}
	if v.gated && !in {
		rep.note(&rep.Contradictions, "contradictions", "%s is marked %s but lies in no episode of its user", v.what(), ExpectGated)
	}
	if seen > 1 {
		rep.Duplicates += seen - 1
		rep.example("duplicates", "%s forwarded %d times", v.what(), seen)
	}
	switch {
	case !in && seen == 0 && v.tooLarge != nil && v.tooLarge():
		rep.DeadLetters++
	case !in && seen == 0:
		rep.Expected++
		rep.note(&rep.Lost, "lost", "%s never forwarded", v.what())
	case !in:
		rep.Expected++
	case seen > 0:
		forwardedIn[v.user] = append(forwardedIn[v.user], v.eventNs)
		covered := slices.ContainsFunc(windows[v.user], func(w window) bool { return w.holds(v.eventNs) })
		switch {
		case v.gated:
			rep.note(&rep.Leaked, "leaked", "%s forwarded in episode %s although Kafka acknowledged its leave first (marked %s)",
				v.what(), describeEpisodes(m.episodes()), ExpectGated)
		case !covered:
			rep.note(&rep.Leaked, "leaked", "%s forwarded in episode %s, in no window of its latest changelog record",
				v.what(), describeEpisodes(m.episodes()))
		default:
			rep.note(&rep.Late, "late", "%s forwarded in episode %s, covered by a window", v.what(), describeEpisodes(m.episodes()))
		}
	}
}

// tooLargeDeadLettered reports whether a record of s that reached rule S5
// went to the DLQ as record_too_large, with its SHA-256.
func (j *Judge) tooLargeDeadLettered(p *path, s *signal) bool {
	for _, at := range j.eligibleOf(p, s) {
		if ok, _ := j.deadLettered(deadLetter{src: source{p.in, at}, reason: reasonTooLarge, sha: s.sha}); ok {
			return true
		}
	}
	return false
}

// judgeWindows checks the windows of the latest records: an exact window
// must hold a signal of its user forwarded inside a final episode, or it
// sends the purge job after contributions that were never made.
// Conservative windows are counted, not judged.
func (j *Judge) judgeWindows(rep *Report, windows map[uint64][]window, forwardedIn map[uint64][]int64) {
	users := slices.Sorted(maps.Keys(windows))
	for _, u := range users {
		for _, w := range windows[u] {
			switch {
			case !w.exact:
				rep.note(&rep.ConservativeWindows, "conservative windows", "user %d: window %v", u, w)
			case !slices.ContainsFunc(forwardedIn[u], w.holds):
				rep.note(&rep.SpuriousWindows, "spurious windows", "user %d: window %v holds no signal forwarded inside an episode", u, w)
			}
		}
	}
}
