package fanout

import (
	"context"
	"errors"
	"testing"
	"time"
)

// alignmentOf returns an alignment of partition 0, assigned at 0, that
// keeps limit observations.
func alignmentOf(limit int) *alignment {
	a := &alignment{}
	a.init(0, 0, 0)
	a.obs.limit = limit
	return a
}

func TestAlignmentThrough(t *testing.T) {
	w := alignmentOf(8)
	for _, o := range []observation{{100, 100, 5}, {200, 200, 7}, {300, 300, 7}, {400, 400, 12}} {
		if _, regressed := w.observe(o); regressed {
			t.Fatalf("observe(%+v) regressed", o)
		}
	}
	tests := []struct {
		name      string
		applied   int64
		notBefore int64
		want      int64
		ok        bool
	}{
		{"nothing applied yet", 4, 0, 0, false},
		{"first observation complete", 5, 0, 100, true},
		{"between ends", 6, 0, 100, true},
		{"equal ends: the newest counts", 7, 0, 300, true},
		{"everything", 12, 0, 400, true},
		{"beyond the newest end", 99, 0, 400, true},
		{"only observations after assignment", 7, 150, 300, true},
		{"assignment after an observation", 7, 301, 0, false},
		{"assignment exactly at an observation", 12, 400, 400, true},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, ok := w.through(tc.applied, tc.notBefore)
			if got != tc.want || ok != tc.ok {
				t.Fatalf("through(%d, %d) = %d, %v; want %d, %v", tc.applied, tc.notBefore, got, ok, tc.want, tc.ok)
			}
		})
	}
}

// TestAlignedThroughWaitsForPrepared: a claim whose users were still
// being restored (or whose commands were still being re-published from
// the partitions of an older count) decided signals against a gate that
// lacked them, because its own commands partition, empty, was applied
// through its end at once: TestCommandsGrownWhileRunning forwarded a
// departed user's signal on Apache Kafka in about half its runs.
func TestAlignedThroughWaitsForPrepared(t *testing.T) {
	w := alignmentOf(8)
	w.observe(observation{100, 100, 0})
	w.prepared.Store(false)
	if ns, ok := w.alignedThrough(); ok {
		t.Fatalf("alignedThrough = %d before the claim is prepared; want nothing known", ns)
	}
	w.prepared.Store(true)
	if ns, ok := w.alignedThrough(); !ok || ns != 100 {
		t.Fatalf("alignedThrough = %d, %v once prepared; want 100, true", ns, ok)
	}
}

func TestAlignmentObserve(t *testing.T) {
	w := alignmentOf(2)
	w.observe(observation{100, 100, 5})
	if _, regressed := w.observe(observation{90, 90, 6}); regressed {
		t.Fatal("an older send is ignored, not a regression")
	}
	if got := w.obs.list; len(got) != 1 || got[0] != (observation{100, 100, 5}) {
		t.Fatalf("observations %+v after an out-of-order send", got)
	}
	prev, regressed := w.observe(observation{200, 200, 4})
	if !regressed || prev != 5 {
		t.Fatalf("observe of a lower end = %d, %v; want 5, true", prev, regressed)
	}
	w.observe(observation{300, 300, 6})
	w.observe(observation{400, 400, 8}) // drops {100, 5}: the ring holds 2
	if got, ok := w.through(5, 0); ok {
		t.Fatalf("through(5) = %d after the only proof of end 5 was dropped", got)
	}
	if got, ok := w.through(6, 0); !ok || got != 300 {
		t.Fatalf("through(6) = %d, %v; want 300", got, ok)
	}
}

// scripted is an aligner over one alignment whose listings answer answer
// (a call per tick, n from 0), one second apart, and which records what it
// reported and the halt it made.
type scripted struct {
	al     *aligner
	a      *alignment
	events []SuspectEndInfo
	gap    *gap
}

type gap struct {
	next, end int64
	epochs    bool // halted for the leader epoch, not the end
}

func newScripted(a *alignment, answer func(n int) listed) *scripted {
	sc := &scripted{a: a}
	n, mono := 0, time.Duration(0)
	ev := EventListener{SuspectEnd: func(i SuspectEndInfo) { sc.events = append(sc.events, i) }}
	sc.al = &aligner{
		suspectFor: suspectFor,
		// A second passes at each reading of the clock, once per tick.
		clk: newClock(func() time.Time { return time.Unix(1000, 0).Add(mono) },
			func() time.Duration { mono += time.Second; return mono }),
		list: func(_ context.Context, parts []int32, _ int8) (map[int32]listed, error) {
			defer func() { n++ }()
			return map[int32]listed{a.partition: answer(n)}, nil
		},
		owned: func() []*alignment { return []*alignment{a} },
		regressed: func(_ int32, next, end int64, cause error) error {
			sc.gap = &gap{next, end, cause != nil}
			return errors.New("regressed")
		},
		listFailed: func(err error) error { return err },
		ev:         *ev.EnsureDefaults(),
	}
	return sc
}

// ticks ticks n times, or until the aligner halts; it returns the tick
// that halted, -1 if none did.
func (sc *scripted) ticks(t *testing.T, n int) int {
	t.Helper()
	for i := range n {
		if err := sc.al.tick(context.Background()); err != nil {
			if sc.gap == nil {
				t.Fatalf("tick %d = %v without a gap", i, err)
			}
			return i
		}
	}
	return -1
}

// suspectTicks is how many one-second ticks a contradiction lasts before
// it halts: the first tick starts it, the one suspectFor later halts.
var suspectTicks = int(suspectFor/time.Second) + 1

// TestTickBelowFloorRegresses: a partition whose commands are read again
// from 0 (its group committed no metadata) still halts when the log's end
// stays below the store's checkpoint: the commands topic was recreated,
// and the store would take its new commands for duplicates of applied ones
// (TestRecreatedCommandsTopicHalts in integration saw no halt without it).
func TestTickBelowFloorRegresses(t *testing.T) {
	for _, tc := range []struct {
		name     string
		end      int64
		wantNext int64 // -1: no halt
	}{
		{"end above the checkpoint", 50, -1},
		{"end at the checkpoint", 40, -1},
		{"end below the checkpoint", 2, 40},
		{"empty log", 0, 40},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &alignment{}
			a.init(3, 0, 0) // commands read from 0
			a.floor = 40
			sc := newScripted(a, func(int) listed { return listed{end: tc.end, epoch: -1} })
			halted := sc.ticks(t, suspectTicks+5)
			switch {
			case tc.wantNext < 0 && halted >= 0:
				t.Fatalf("halted at tick %d at end %d, want no halt", halted, tc.end)
			case tc.wantNext < 0:
			case halted != suspectTicks-1 || *sc.gap != (gap{tc.wantNext, tc.end, false}):
				t.Fatalf("halted at tick %d with gap %+v; want tick %d, the gap {next %d, end %d}",
					halted, sc.gap, suspectTicks-1, tc.wantNext, tc.end)
			}
		})
	}
}

// TestTickStaleLeader: a broker that led the commands partition and was
// paused answers, once continued and until it learns it leads no more,
// with the end it had. CI's broker-pause scenario halted on it ("log end 5
// is below the local checkpoint 11") where a moment later the leader
// answered 11; and an end above the commands applied, from such a broker,
// would have claimed that commands acknowledged since were applied.
func TestTickStaleLeader(t *testing.T) {
	const zombie, leader = 6, 7 // leader epochs
	for _, tc := range []struct {
		name    string
		floor   int64
		applied int64
		known   int32 // the leader epoch known at the claim, -1 none
		stale   listed
	}{
		// The instance knows the new leader's epoch: the old one's answer
		// is older, whatever its end.
		{"below the checkpoint, epoch known", 11, 0, leader, listed{5, zombie}},
		{"above the commands applied, epoch known", 0, 5, leader, listed{5, zombie}},
		// A client whose metadata came from the old leader knows no newer
		// epoch: the end below the checkpoint is what gives it away.
		{"below the checkpoint, epoch unknown", 11, 0, -1, listed{5, zombie}},
		{"below the checkpoint, epoch not said", 11, 0, -1, listed{5, -1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := &alignment{}
			a.init(0, 0, tc.applied)
			a.floor = tc.floor
			a.raiseEpoch(tc.known)
			const staleTicks = 4
			sc := newScripted(a, func(n int) listed {
				if n < staleTicks {
					return tc.stale
				}
				return listed{end: 11, epoch: leader}
			})
			if halted := sc.ticks(t, staleTicks); halted >= 0 {
				t.Fatalf("halted at tick %d on a stale leader's answer %+v: gap %+v", halted, tc.stale, sc.gap)
			}
			if at, ok := a.alignedThrough(); ok {
				t.Fatalf("aligned through %d on a stale leader's answer %+v alone", at, tc.stale)
			}
			if len(a.obs.list) != 0 {
				t.Fatalf("observations %+v recorded from a stale leader", a.obs.list)
			}
			if halted := sc.ticks(t, 1); halted >= 0 {
				t.Fatalf("halted on the leader's answer: gap %+v", sc.gap)
			}
			if got := a.obs.list; len(got) != 1 || got[0].end != 11 {
				t.Fatalf("observations %+v, want the leader's end 11", got)
			}
			if got := a.epoch.Load(); got != leader {
				t.Fatalf("known epoch %d after the leader answered, want %d", got, leader)
			}
			if len(sc.events) != 2 || sc.events[0].Cleared || sc.events[0].End != 5 ||
				!sc.events[1].Cleared || sc.events[1].Lasted != staleTicks*time.Second {
				t.Fatalf("events %+v, want the suspicion reported once, then cleared after %v", sc.events, staleTicks*time.Second)
			}
		})
	}
}

// TestTickEpochWentBack: a commands topic deleted and created again starts
// its leader epochs over; its end may be above the store's checkpoint,
// which then means nothing. It halts, once the older epoch has lasted.
func TestTickEpochWentBack(t *testing.T) {
	a := &alignment{}
	a.init(0, 0, 40)
	a.floor = 40
	a.raiseEpoch(7)
	sc := newScripted(a, func(int) listed { return listed{end: 50, epoch: 0} })
	if halted := sc.ticks(t, suspectTicks+5); halted != suspectTicks-1 || *sc.gap != (gap{40, 50, true}) {
		t.Fatalf("halted at tick %d with gap %+v; want tick %d, the epoch's gap at end 50", halted, sc.gap, suspectTicks-1)
	}
}

// TestTickSuspicionEndsWithATrustedAnswer: the contradictions must last
// unbroken; one trusted answer starts the count again.
func TestTickSuspicionEndsWithATrustedAnswer(t *testing.T) {
	a := &alignment{}
	a.init(0, 0, 0)
	a.floor = 10
	half := suspectTicks - 2
	sc := newScripted(a, func(n int) listed {
		if n == half {
			return listed{end: 10, epoch: -1}
		}
		return listed{end: 3, epoch: -1}
	})
	if halted := sc.ticks(t, 2*half); halted >= 0 {
		t.Fatalf("halted at tick %d: gap %+v", halted, sc.gap)
	}
	if halted := sc.ticks(t, suspectTicks); halted < 0 {
		t.Fatal("no halt after an unbroken run of contradictions")
	}
}
