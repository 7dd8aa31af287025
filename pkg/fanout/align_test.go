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
	for _, o := range []observation{{100, 5}, {200, 7}, {300, 7}, {400, 12}} {
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

func TestAlignmentObserve(t *testing.T) {
	w := alignmentOf(2)
	w.observe(observation{100, 5})
	if _, regressed := w.observe(observation{90, 6}); regressed {
		t.Fatal("an older send is ignored, not a regression")
	}
	if got := w.obs.list; len(got) != 1 || got[0] != (observation{100, 5}) {
		t.Fatalf("observations %+v after an out-of-order send", got)
	}
	prev, regressed := w.observe(observation{200, 4})
	if !regressed || prev != 5 {
		t.Fatalf("observe of a lower end = %d, %v; want 5, true", prev, regressed)
	}
	w.observe(observation{300, 6})
	w.observe(observation{400, 8}) // drops {100, 5}: the ring holds 2
	if got, ok := w.through(5, 0); ok {
		t.Fatalf("through(5) = %d after the only proof of end 5 was dropped", got)
	}
	if got, ok := w.through(6, 0); !ok || got != 300 {
		t.Fatalf("through(6) = %d, %v; want 300", got, ok)
	}
}

// TestTickBelowFloorRegresses: a partition whose commands are read again
// from 0 (its group committed no metadata) still halts when the log's end
// is below the store's checkpoint: the commands topic was recreated, and
// the store would take its new commands for duplicates of applied ones
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
			type gap struct{ next, end int64 }
			var got *gap
			now := int64(1)
			al := &aligner{
				now: func() time.Time { now++; return time.Unix(0, now) },
				list: func(_ context.Context, parts []int32, _ int8) (map[int32]int64, error) {
					return map[int32]int64{3: tc.end}, nil
				},
				owned: func() []*alignment { return []*alignment{a} },
				regressed: func(_ int32, next, end int64) error {
					got = &gap{next, end}
					return errors.New("regressed")
				},
				listFailed: func(err error) error { return err },
				ev:         *(&EventListener{}).EnsureDefaults(),
			}
			err := al.tick(context.Background())
			switch {
			case tc.wantNext < 0 && err != nil:
				t.Fatalf("tick = %v at end %d, want no halt", err, tc.end)
			case tc.wantNext >= 0 && (got == nil || *got != gap{tc.wantNext, tc.end}):
				t.Fatalf("tick = %v, gap %+v; want the gap {next %d, end %d}", err, got, tc.wantNext, tc.end)
			}
		})
	}
}
