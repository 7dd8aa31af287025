package fanout

import "testing"

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
