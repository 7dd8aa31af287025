package oracle_test

import (
	"fmt"

	"github.com/cohortgate/cohortgate/integration/oracle"
)

// A run in memory: user 7 leaves at t = 1s; its signal stamped at 2s is
// forwarded anyway, the one at 0.5s is not forwarded at all, and no
// changelog record says the user left.
func ExampleJudge() {
	j, err := oracle.NewJudge(oracle.Config{
		Topics:     oracle.Topics{Commands: "c", Signals: "s", Cohort: "o", DLQ: "d", Changelog: "l"},
		Partitions: 1,
	})
	if err != nil {
		panic(err)
	}
	j.AddCommand(oracle.Record{Key: []byte("7"), Value: []byte(`{"op":"leave","user_id":7,"at_ns":1000000000}`), Timestamp: 1000})
	early := oracle.Record{Key: []byte("7"), Value: []byte("early"), Timestamp: 500}
	late := oracle.Record{Offset: 1, Key: []byte("7"), Value: []byte("late"), Timestamp: 2000}
	j.AddSignal(early)
	j.AddSignal(late)
	j.AddCohort(late)
	rep := j.Report()
	fmt.Println("damage:", rep.Damage())
	fmt.Print(rep.Details())
	// Output:
	// damage: 3
	// lost 1 (damage)
	//   signal s 0/0 of user 7 at 00:00:00.500 (500000000) never forwarded
	// leaked 1 (damage)
	//   signal s 0/1 of user 7 at 00:00:02.000 (2000000000) forwarded in episode [[1000000000,∞)], in no window of its latest changelog record
	// changelog mismatches 1 (damage)
	//   user 7: no changelog record; the rules say [[1000000000,∞)]
}
