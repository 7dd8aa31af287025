package membership

import (
	"errors"
	"fmt"
	"testing"
)

// userBytes returns the bytes of user's dump: everything the store keeps
// of the user, as a changelog record's restore header carries it.
func userBytes(t testing.TB, s *Store, user uint64) int {
	t.Helper()
	b := s.NewBatch()
	defer b.Close()
	d, err := b.AppendDump(nil, user)
	if err != nil {
		t.Fatal(err)
	}
	return len(d)
}

// copyUser imports into dst everything src keeps of user, through a
// dump, as a restore from a changelog record's header does.
func copyUser(t testing.TB, src, dst *Store, user uint64) {
	t.Helper()
	b := src.NewBatch()
	d, err := b.AppendDump(nil, user)
	b.Close()
	if err != nil {
		t.Fatal(err)
	}
	dec, err := DecodeDump(d)
	if err != nil {
		t.Fatal(err)
	}
	im := dst.NewImport()
	if err := im.Put(dec); err != nil {
		t.Fatal(err)
	}
	if err := im.Commit(); err != nil {
		t.Fatal(err)
	}
}

// TestIdentityWindowBoundsAUser: a service re-sending a user's leave with a
// fresh request id each time (a retry loop, a periodic job) made every
// identity stay for ever, and every later changelog record restate them
// all: n re-sends cost O(n²) bytes, and a large enough n halted the
// processor. The store keeps the last IdentityWindow identities: the
// user's bytes stop growing once the window is full.
func TestIdentityWindowBoundsAUser(t *testing.T) {
	s := openMem(t)
	const user = 7
	leave := func(i int) Command {
		return Command{Op: OpLeave, UserID: user, AtNs: 100, RequestID: fmt.Sprint("resend-", i)}
	}
	sizes := map[int]int{}
	for i := range 5000 {
		if _, err := s.Apply(leave(i)); err != nil {
			t.Fatal(err)
		}
		if n := i + 1; n == 1 || n == IdentityWindow || n == 1000 || n == 5000 {
			sizes[n] = userBytes(t, s, user)
		}
	}
	t.Logf("bytes of one user after n re-sent leaves: %v", sizes)
	if sizes[1000] != sizes[IdentityWindow] || sizes[5000] != sizes[IdentityWindow] {
		t.Fatalf("a user's bytes grow with its commands: %v", sizes)
	}
	if max := 9 + 64 + IdentityWindow*dumpIdentityLen + 8; sizes[5000] > max {
		t.Fatalf("one user holds %d bytes, want at most %d", sizes[5000], max)
	}
	b := s.NewBatch()
	defer b.Close()
	d, err := b.AppendDump(nil, user)
	if err != nil {
		t.Fatal(err)
	}
	dec, err := DecodeDump(d)
	if err != nil {
		t.Fatal(err)
	}
	if dec.Identities != IdentityWindow {
		t.Fatalf("%d identities kept, want %d", dec.Identities, IdentityWindow)
	}
	b.Close()

	// The window holds the newest: each of the last IdentityWindow is
	// still a duplicate, the one before them is taken as new.
	for i := 5000 - IdentityWindow; i < 5000; i++ {
		if c, err := s.Apply(leave(i)); err != nil || !c.Duplicate {
			t.Fatalf("leave %d of the window delivered again: %+v, %v; want a duplicate", i, c, err)
		}
	}
	if c, err := s.Apply(leave(5000 - IdentityWindow - 1)); err != nil || c.Duplicate || c.Changed {
		t.Fatalf("a leave older than the window: %+v, %v; want a new command that changes nothing", c, err)
	}
}

// TestIdentityWindowForgetsInOrder: the identity forgotten is always the
// oldest remembered, in a store and through a dump and an import alike,
// so a restore forgets what a replay forgets.
func TestIdentityWindowForgetsInOrder(t *testing.T) {
	src, dst := openMem(t), openMem(t)
	const user = 3
	cmd := func(i int) Command {
		// Alternate leaves and rejoins at rising boundaries, so that
		// each changes the state and none is refused.
		c := Command{Op: OpLeave, UserID: user, AtNs: uint64(10 * (i + 1))}
		if i%2 == 1 {
			c.Op = OpRejoin
		}
		return c
	}
	const n = IdentityWindow + 10
	for i := range n {
		if c, err := src.Apply(cmd(i)); err != nil || !c.Changed {
			t.Fatalf("command %d: %+v, %v", i, c, err)
		}
	}
	copyUser(t, src, dst, user)
	for _, s := range []*Store{src, dst} {
		// One more command: the oldest of the window (command 10) goes.
		if _, err := s.Apply(Command{Op: OpLeave, UserID: user, AtNs: 10_000}); err != nil {
			t.Fatal(err)
		}
		// Newest first: a duplicate writes nothing, so the window stays
		// as it is until command 10, which is new again.
		for i := n - 1; i >= 10; i-- {
			c, err := s.Apply(cmd(i))
			if err != nil && !errors.Is(err, ErrRejoinBeforeLeave) {
				t.Fatal(err)
			}
			if want := i > 10; c.Duplicate != want {
				t.Fatalf("command %d delivered again: duplicate %v, want %v", i, c.Duplicate, want)
			}
		}
	}
}
