package oracle

import (
	"fmt"
	"strings"
	"time"
)

// maxExamples bounds the examples a Report keeps per kind of finding.
const maxExamples = 10

// Report is the oracle's verdict on one run. Counts of signals count
// distinct signals: records of an input with the same key, value and
// timestamp are one signal (a re-published copy is its original). With
// several routes, counts are summed over them: a signal written to two
// inputs counts twice.
type Report struct {
	// What the input holds, by the README's rules.
	SignalsIn         int // distinct signals in the inputs
	CommandsIn        int // records in the commands topic, re-published copies included
	Applied           int // commands that reached rule C6 or C7 for the first time and were not refused
	DuplicateCommands int // commands whose identity was applied before: no-ops (C5)
	Refused           int // rejoins before the open leave (C7)
	Misrouted         int // input records outside their key's murmur2 partition (C2, S2)
	DeadLetters       int // input records the rules send to the DLQ
	Users             int // users with at least one episode in the end
	Episodes          int // their episodes, empty and open ones included
	Gated             int // signals the load marked ExpectGated

	// What the processor wrote.
	Forwarded      int // records in the outputs (read_committed)
	Expected       int // signals that must be forwarded exactly once
	DLQ            int // records in the DLQ topic
	ChangelogUsers int // users with at least one changelog record
	Windows        int // late-leave windows in the users' latest changelog records

	// Damage: each breaks a promise of the README.
	Duplicates              int // cohort records beyond the first of their signal
	Lost                    int // expected signals never forwarded (nor dead-lettered as too large, where that was allowed)
	Leaked                  int // signals forwarded inside a final episode, not covered by a window, or marked gated
	Unknown                 int // cohort records that are no signal the rules let through (not in the input, or dead-lettered, or misrouted)
	Hanging                 int // partitions still in an open transaction after the grace
	PoisonNotDLQd           int // input records the rules send to the DLQ with no DLQ record naming them with a fitting reason (and, for record_too_large, the original's SHA-256)
	MisroutedNotRepublished int // misrouted input records with no re-published copy in their key's partition
	ChangelogMismatches     int // users whose latest changelog record differs from the model (or is missing, or does not decode)
	MissingWindows          int // windows of a user's earlier changelog record not covered by a later one
	SpuriousWindows         int // exact windows of a latest record that hold no forwarded signal of a final episode
	Contradictions          int // signals the load marked gated that lie in no final episode: the load and the oracle disagree

	// Allowed, and shown.
	Late                int // signals forwarded inside a final episode and covered by a window of the user's latest record (promise 2)
	ConservativeWindows int // windows with "exact": false in the latest records

	// Examples of each finding above, by its name in Details (e.g. "leaked").
	Examples      map[string][]string
	HangingDetail []string
	Took          time.Duration
}

// finding names one count of a Report for Details and Damage.
type finding struct {
	name   string
	damage bool
	count  func(*Report) int
}

// findings lists the counts Details reports, damage first.
var findings = []finding{
	{"duplicates", true, func(r *Report) int { return r.Duplicates }},
	{"lost", true, func(r *Report) int { return r.Lost }},
	{"leaked", true, func(r *Report) int { return r.Leaked }},
	{"unknown", true, func(r *Report) int { return r.Unknown }},
	{"hanging", true, func(r *Report) int { return r.Hanging }},
	{"poison not dead-lettered", true, func(r *Report) int { return r.PoisonNotDLQd }},
	{"misrouted not re-published", true, func(r *Report) int { return r.MisroutedNotRepublished }},
	{"changelog mismatches", true, func(r *Report) int { return r.ChangelogMismatches }},
	{"missing windows", true, func(r *Report) int { return r.MissingWindows }},
	{"spurious windows", true, func(r *Report) int { return r.SpuriousWindows }},
	{"contradictions", true, func(r *Report) int { return r.Contradictions }},
	{"late", false, func(r *Report) int { return r.Late }},
	{"conservative windows", false, func(r *Report) int { return r.ConservativeWindows }},
}

// Damage is the sum of every kind of damage: everything in Report's
// damage block. Late signals and conservative windows are allowed.
func (r Report) Damage() int {
	n := 0
	for _, f := range findings {
		if f.damage {
			n += f.count(&r)
		}
	}
	return n
}

// Details describes every finding with its examples, one per line; empty
// when there is none.
func (r Report) Details() string {
	var b strings.Builder
	for _, f := range findings {
		n := f.count(&r)
		if n == 0 {
			continue
		}
		word := "damage"
		if !f.damage {
			word = "allowed"
		}
		fmt.Fprintf(&b, "%s %d (%s)\n", f.name, n, word)
		for _, e := range r.Examples[f.name] {
			fmt.Fprintf(&b, "  %s\n", e)
		}
	}
	for _, h := range r.HangingDetail {
		fmt.Fprintf(&b, "hanging: %s\n", h)
	}
	return b.String()
}

// note adds one to a count and keeps an example of it.
func (r *Report) note(count *int, name string, format string, args ...any) {
	*count++
	r.example(name, format, args...)
}

// example keeps an example of the finding name, up to maxExamples.
func (r *Report) example(name string, format string, args ...any) {
	if r.Examples == nil {
		r.Examples = make(map[string][]string)
	}
	if len(r.Examples[name]) < maxExamples {
		r.Examples[name] = append(r.Examples[name], fmt.Sprintf(format, args...))
	}
}
