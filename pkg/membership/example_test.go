package membership_test

import (
	"context"
	"fmt"
	"log"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/cohortgate/cohortgate/pkg/membership"
)

func Example() {
	s, err := membership.Open("membership", &membership.Options{FS: vfs.NewMem()})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	const t0 = 1764633600000000000 // 2025-12-02T00:00:00Z in ns
	if _, err := s.Leave(42, t0); err != nil {
		log.Fatal(err)
	}
	st, _ := s.Status(42)
	fmt.Println("after leave:", st.Status, st.LeftAtNs)

	// A command and the offset after it commit together.
	b := s.NewBatch()
	defer b.Close()
	c, err := b.Rejoin(42, t0+3600e9)
	if err != nil {
		log.Fatal(err)
	}
	if err := b.SetCheckpoint("membership.commands", 0, 2); err != nil {
		log.Fatal(err)
	}
	if err := b.Commit(); err != nil {
		log.Fatal(err)
	}
	fmt.Println("rejoin closed:", *c.Closed)

	// Leaving again before the last rejoin starts at the rejoin: history is
	// never rewritten.
	c, _ = s.Leave(42, t0+1800e9)
	fmt.Println("episodes:", c.After.Episodes(nil))

	next, _, _ := s.Checkpoint("membership.commands", 0)
	fmt.Println("next offset:", next)

	// On start, the gate is rebuilt from every user who ever left.
	stats, err := s.Restore(context.Background(), func(m membership.Member) error {
		fmt.Println("restore:", m.UserID, m.Status, len(m.History), "closed")
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("members:", stats.Members, "episodes:", stats.Episodes)
	// Output:
	// after leave: left 1764633600000000000
	// rejoin closed: {1764633600000000000 1764637200000000000}
	// episodes: [{1764633600000000000 1764637200000000000} {1764637200000000000 18446744073709551615}]
	// next offset: 2
	// restore: 42 left 1 closed
	// members: 1 episodes: 2
}

// A batch commits a command together with the note of its user and the
// records the caller must still deliver elsewhere; once delivered, the
// outbox entries are deleted.
func ExampleStore_Outbox() {
	s, err := membership.Open("membership", &membership.Options{FS: vfs.NewMem()})
	if err != nil {
		log.Fatal(err)
	}
	defer s.Close()

	const t0 = 1764633600000000000 // 2025-12-02T00:00:00Z in ns
	b := s.NewBatch()
	defer b.Close()
	c, err := b.Leave(42, t0)
	if err != nil {
		log.Fatal(err)
	}
	// A signal at t0+5s was forwarded before the leave arrived.
	if err := b.RecordLateLeave(42, membership.LateLeave{LeftAtNs: c.After.LeftAtNs, ForwardedThroughNs: t0 + 5e9}); err != nil {
		log.Fatal(err)
	}
	if err := b.SetNote(42, []byte(`{"request_id":"r-1"}`)); err != nil {
		log.Fatal(err)
	}
	if _, err := b.AddOutbox([]byte("changelog: user 42 left")); err != nil {
		log.Fatal(err)
	}
	if err := b.Commit(); err != nil {
		log.Fatal(err)
	}

	m, _ := s.Member(42)
	fmt.Println("late leaves:", m.LateLeaves, "note:", string(m.Note))
	var delivered uint64
	err = s.Outbox(func(seq uint64, value []byte) error {
		fmt.Println("deliver:", seq, string(value))
		delivered = seq
		return nil
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := s.DeleteOutbox(delivered); err != nil {
		log.Fatal(err)
	}
	// Output:
	// late leaves: [{1764633600000000000 1764633605000000000 false}] note: {"request_id":"r-1"}
	// deliver: 1 changelog: user 42 left
}
