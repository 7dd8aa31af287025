package membership

import (
	"errors"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
)

// TestRedeliveryChangesNothing is the property behind
// TestRedeliveredLeaveAfterRejoin (integration), which broke it: a
// command delivered again (a producer's retry, a re-published record) gives
// the same state, byte for byte, whatever happened in between. Each round
// applies a random sequence of commands to one store, and the same sequence
// with random re-deliveries of earlier commands inserted to another; the
// two stores must hold the same bytes, and every re-delivery must report
// itself a duplicate.
//
// The sequences are drawn from few users, boundaries and request ids, so
// that clamps, moved boundaries, empty episodes, reopens and refusals all
// occur. COHORTGATE_SEED=n replays the round of seed n.
func TestRedeliveryChangesNothing(t *testing.T) {
	rounds, first := 300, uint64(1)
	if s := os.Getenv("COHORTGATE_SEED"); s != "" {
		seed, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("COHORTGATE_SEED: %v", err)
		}
		rounds, first = 1, seed
	}
	for seed := first; seed < first+uint64(rounds); seed++ {
		rng := rand.New(rand.NewPCG(seed, 0x5eed))
		var cmds []Command
		for range 1 + rng.IntN(30) {
			c := Command{Op: OpLeave, UserID: uint64(rng.IntN(3)), AtNs: uint64(rng.IntN(12)) * 10}
			if rng.IntN(2) == 0 {
				c.Op = OpRejoin
			}
			if rng.IntN(4) == 0 {
				c.RequestID = "r" + strconv.Itoa(rng.IntN(2))
			}
			cmds = append(cmds, c)
		}
		plain, redelivered := openMem(t), openMem(t)
		for i, c := range cmds {
			applyOne(t, plain, c, false)
			applyOne(t, redelivered, c, false)
			for rng.IntN(3) == 0 {
				applyOne(t, redelivered, cmds[rng.IntN(i+1)], true)
			}
		}
		if a, b := dump(t, plain), dump(t, redelivered); a != b {
			t.Fatalf("seed %d: re-deliveries changed the store (COHORTGATE_SEED=%d replays it)\ncommands %+v\nwithout:\n%s\nwith:\n%s",
				seed, seed, cmds, a, b)
		}
	}
}

// applyOne applies c in a batch of its own; a re-delivery must be a
// duplicate. A refused rejoin is part of the sequence, not a failure.
func applyOne(t *testing.T, s *Store, c Command, again bool) {
	t.Helper()
	ch, err := s.Apply(c)
	if err != nil && !errors.Is(err, ErrRejoinBeforeLeave) {
		t.Fatalf("Apply(%+v): %v", c, err)
	}
	// A refused command stays refused: its re-delivery is a duplicate
	// that says so again.
	if again && (!ch.Duplicate || ch.Changed) {
		t.Fatalf("re-delivered %+v: %+v, %v; want a duplicate", c, ch, err)
	}
}
