package gate_test

import (
	"errors"
	"fmt"

	"github.com/cohortgate/cohortgate/pkg/gate"
)

func Example() {
	m := gate.New(gate.Capacity(1000))

	// User 42 left at 100, rejoined at 200 and left again at 300.
	err := m.Set(42, []gate.Episode{
		{LeftAtNs: 100, RejoinedAtNs: 200},
		{LeftAtNs: 300, RejoinedAtNs: gate.OpenEnd},
	})
	if err != nil {
		panic(err)
	}
	for _, ts := range []uint64{99, 100, 199, 200, 300, 1 << 62} {
		fmt.Printf("user 42 at %d: %v\n", ts, m.Allows(42, ts))
	}
	fmt.Println("user 7, who never left:", m.Allows(7, 150))
	fmt.Println("episodes of 42:", m.Episodes(42, nil))

	// Episodes that overlap are refused; the user's entry stays as it was.
	err = m.Set(42, []gate.Episode{{LeftAtNs: 10, RejoinedAtNs: 30}, {LeftAtNs: 20, RejoinedAtNs: 40}})
	fmt.Println(errors.Is(err, gate.ErrBadEpisodes), err)
	fmt.Println("users with episodes:", m.Len())
	// Output:
	// user 42 at 99: true
	// user 42 at 100: false
	// user 42 at 199: false
	// user 42 at 200: true
	// user 42 at 300: false
	// user 42 at 4611686018427387904: false
	// user 7, who never left: true
	// episodes of 42: [{100 200} {300 18446744073709551615}]
	// true gate: bad episodes: user 42: episode 1 [20, 40) starts before the previous episode ends
	// users with episodes: 1
}
