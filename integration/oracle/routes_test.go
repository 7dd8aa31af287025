package oracle

import (
	"testing"
)

// TestJudgeRoutes judges runs with a second route (attr into attr.out):
// each route's signals are judged against its own output, by the same
// episodes and the same changelog.
func TestJudgeRoutes(t *testing.T) {
	topics := testTopics
	topics.Routes = []Route{{Signals: "attr", Cohort: "attr.out"}}
	for _, tc := range []struct {
		name  string
		build func(r *routesRun)
		want  counts
	}{
		{"a clean run: the same signals on both routes, each forwarded on its own", func(r *routesRun) {
			r.cmd(1, "leave", 100, "a")
			r.changelog(1, left(100))
			for route := range 2 {
				r.forward(route, r.sig(route, 1, 99), r.sig(route, 2, 150))
				r.sig(route, 1, 150, gated)
			}
		}, counts{Expected: 4}},

		{"a signal of the second route forwarded inside an episode leaks, though the first route held its twin", func(r *routesRun) {
			r.cmd(1, "leave", 100, "a")
			r.changelog(1, left(100))
			r.sig(0, 1, 150, gated)
			r.forward(1, r.sig(1, 1, 150, gated))
		}, counts{Leaked: 1}},

		{"forwarded to the other route's output: lost on its own, unknown on the other", func(r *routesRun) {
			s := r.sig(1, 3, 10)
			r.forward(0, s)
		}, counts{Expected: 1, Lost: 1, Unknown: 1}},

		{"a duplicate on the second route", func(r *routesRun) {
			s := r.sig(1, 3, 10)
			r.forward(1, s, s)
		}, counts{Expected: 1, Duplicates: 1}},

		{"a window justified by the second route's signal alone is exact, not spurious", func(r *routesRun) {
			r.cmd(1, "leave", 100, "a")
			r.sig(0, 1, 150)
			r.forward(1, r.sig(1, 1, 150))
			r.changelog(1, state{leftAt: 100, windows: [][3]int64{{100, 150, 1}}})
		}, counts{Late: 1}},

		{"a bad key on the second route must be dead-lettered naming that input", func(r *routesRun) {
			a := r.raw(1, []byte("x"), 0, 10)
			r.deadLetter(topics.Routes[0].Signals, a, "key_not_decimal")
			b := r.raw(1, []byte("y"), 1, 10)
			r.deadLetter(testTopics.Signals, b, "key_not_decimal") // names the wrong input
		}, counts{Poison: 1}},
	} {
		for _, style := range valueStyles {
			t.Run(tc.name+"/"+style.name, func(t *testing.T) {
				j, err := NewJudge(Config{Topics: topics, Partitions: testParts})
				if err != nil {
					t.Fatal(err)
				}
				r := &routesRun{run: &run{t: t, j: j, next: make(map[string]map[int32]int64), valueStyle: style}, routes: topics.routes()}
				tc.build(r)
				rep := r.report()
				if got := countsOf(rep); got != tc.want {
					t.Errorf("counts = %+v, want %+v\n%s", got, tc.want, rep.Details())
				}
				if rep.Damage() != tc.want.damage() {
					t.Errorf("Damage() = %d, want %d", rep.Damage(), tc.want.damage())
				}
			})
		}
	}
}

// routesRun adds records of a run with several routes.
type routesRun struct {
	*run
	routes []Route
}

// raw adds a record to route i's input as given; its value is unique.
func (r *routesRun) raw(i int, key []byte, p int32, tsMs int64, hs ...Header) Record {
	rec := Record{Partition: p, Offset: r.offset(r.routes[i].Signals, p), Key: key,
		Value: r.value(), Timestamp: tsMs, Headers: hs}
	r.add(kindSignal, i, rec)
	return rec
}

// sig adds a signal of user to route i's input, in its key's partition.
func (r *routesRun) sig(i int, user uint64, tsMs int64, hs ...Header) Record {
	return r.raw(i, []byte(keyOf(user)), right(keyOf(user)), tsMs, hs...)
}

// forward adds recs to route i's output.
func (r *routesRun) forward(i int, recs ...Record) {
	for _, rec := range recs {
		cp := rec
		cp.Offset = r.offset(r.routes[i].Cohort, rec.Partition)
		r.add(kindCohort, i, cp)
	}
}
