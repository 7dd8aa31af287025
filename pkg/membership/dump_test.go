package membership

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

// TestImportOfDumpsIsTheStore builds a store through commands of every
// kind (leaves, rejoins, a refused rejoin, duplicates, a moved boundary, a
// reopened empty episode, late-leave windows, notes), imports the dump of
// each user into an empty store, and checks that both hold the same bytes
// in the users and identities key spaces, and the checkpoint; then that a
// command delivered again is a duplicate in the imported store too.
func TestImportOfDumpsIsTheStore(t *testing.T) {
	src := openMem(t)
	b := src.NewBatch()
	apply := func(c Command) {
		t.Helper()
		if _, err := b.Apply(c); err != nil && !errors.Is(err, ErrRejoinBeforeLeave) {
			t.Fatalf("Apply(%+v): %v", c, err)
		}
	}
	apply(Command{Op: OpLeave, UserID: 1, AtNs: 100, RequestID: "a"})
	apply(Command{Op: OpRejoin, UserID: 1, AtNs: 200})
	apply(Command{Op: OpLeave, UserID: 2, AtNs: 500})
	apply(Command{Op: OpRejoin, UserID: 2, AtNs: 300}) // refused, remembered
	apply(Command{Op: OpLeave, UserID: 2, AtNs: 400})  // moves left_at back
	apply(Command{Op: OpLeave, UserID: 3, AtNs: 50})
	apply(Command{Op: OpRejoin, UserID: 3, AtNs: 50}) // the empty episode
	apply(Command{Op: OpLeave, UserID: 3, AtNs: 10})  // reopens it
	apply(Command{Op: OpLeave, UserID: 4, AtNs: 70})
	if err := b.RecordLateLeave(4, LateLeave{LeftAtNs: 70, ForwardedThroughNs: 90, Exact: true}); err != nil {
		t.Fatal(err)
	}
	for u := uint64(1); u <= 5; u++ {
		if err := b.SetNote(u, []byte(`{"n":`+strings.Repeat("9", int(u))+`}`)); err != nil {
			t.Fatal(err)
		}
	}
	if err := b.SetCheckpoint("cmds", 3, 42); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}

	dst := openMem(t)
	im := dst.NewImport()
	defer im.Close()
	var members []Member
	if err := src.Export(func(u uint64, dump []byte) error {
		d, err := DecodeDump(dump)
		if err != nil {
			return err
		}
		members = append(members, d.Member)
		return im.Put(d)
	}); err != nil {
		t.Fatal(err)
	}
	if err := im.SetCheckpoint("cmds", 3, 42); err != nil {
		t.Fatal(err)
	}
	if err := im.Commit(); err != nil {
		t.Fatal(err)
	}
	if len(members) != 5 {
		t.Fatalf("exported %d users, want 5", len(members))
	}
	if got, want := dumpSpaces(t, dst), dumpSpaces(t, src); got != want {
		t.Fatalf("imported store differs\nimported:\n%s\nsource:\n%s", got, want)
	}
	checkMembers(t, dst, members)

	// Rule C5 survives the import: the leave of user 1 delivered again
	// changes nothing, and the refused rejoin of user 2 is refused again.
	for _, s := range []*Store{src, dst} {
		c := Command{Op: OpLeave, UserID: 1, AtNs: 100, RequestID: "a"}
		if ch, err := s.Apply(c); err != nil || !ch.Duplicate || ch.Changed {
			t.Fatalf("%+v delivered again: %+v, %v; want a duplicate", c, ch, err)
		}
		c = Command{Op: OpRejoin, UserID: 2, AtNs: 300}
		if ch, err := s.Apply(c); !errors.Is(err, ErrRejoinBeforeLeave) || !ch.Duplicate || ch.Changed {
			t.Fatalf("%+v delivered again: %+v, %v; want a duplicate refused again", c, ch, err)
		}
	}
	if got, want := dumpSpaces(t, dst), dumpSpaces(t, src); got != want {
		t.Fatalf("after the duplicates, imported store differs\nimported:\n%s\nsource:\n%s", got, want)
	}
}

// dumpSpaces is dump without the metadata and outbox spaces: the format
// version and outbox counter are not a user's.
func dumpSpaces(t *testing.T, s *Store) string {
	var keep []string
	for _, line := range strings.Split(dump(t, s), "\n") {
		if strings.HasPrefix(line, "01") || strings.HasPrefix(line, "02") || strings.HasPrefix(line, "05") {
			keep = append(keep, line)
		}
	}
	return strings.Join(keep, "\n")
}

func TestDecodeDumpRefuses(t *testing.T) {
	s := openMem(t)
	mustOK(t)(s.Leave(7, 100))
	mustOK(t)(s.Rejoin(7, 200))
	var good []byte
	if err := s.Export(func(_ uint64, d []byte) error { good = bytes.Clone(d); return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := DecodeDump(good); err != nil {
		t.Fatalf("DecodeDump(good): %v", err)
	}
	for name, bad := range map[string][]byte{
		"empty":    nil,
		"version":  append([]byte{3}, good[1:]...),
		"trailing": append(bytes.Clone(good), 0),
		"cut":      good[:len(good)-1],
		"no state": func() []byte {
			// user 7 with its history record only
			d := append([]byte(nil), good[:9]...)
			d = append(d, 1, 9)
			d = append(d, TagCommunityLeave, 0, 0, 0, 0, 0, 0, 0, 100)
			d = append(d, 8, 200, 0, 0, 0, 0, 0, 0, 0)
			return append(d, 0)
		}(),
		"huge count": append(append([]byte(nil), good[:9]...), 0xff, 0xff, 0xff, 0xff, 0x0f),
	} {
		if _, err := DecodeDump(bad); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: DecodeDump = %v, want ErrCorrupt", name, err)
		}
	}
}

// TestImportParts: an import written in parts, by goroutines side by side
// and in any order of ranges, holds the same bytes as one written in one
// part; parts whose ranges of users overlap are refused and write nothing.
func TestImportParts(t *testing.T) {
	src := openMem(t)
	b := src.NewBatch()
	for u := uint64(1); u <= 90; u++ {
		if _, err := b.Apply(Command{Op: OpLeave, UserID: u, AtNs: 100 * u}); err != nil {
			t.Fatal(err)
		}
		if u%3 == 0 {
			if _, err := b.Apply(Command{Op: OpRejoin, UserID: u, AtNs: 100*u + 50}); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := b.SetCheckpoint("cmds", 0, 180); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	var dumps [][]byte
	if err := src.Export(func(_ uint64, d []byte) error { dumps = append(dumps, bytes.Clone(d)); return nil }); err != nil {
		t.Fatal(err)
	}
	// imp imports dumps[ranges[i][0]:ranges[i][1]] into part i, each in a
	// goroutine of its own, and commits.
	imp := func(ranges [][2]int) (*Store, error) {
		dst := openMem(t)
		im := dst.NewImport()
		defer im.Close()
		parts := []*ImportPart{im.parts[0]}
		for range ranges[1:] {
			parts = append(parts, im.Part())
		}
		errs := make(chan error, len(ranges))
		for i, r := range ranges {
			go func() {
				var d Dump
				for _, raw := range dumps[r[0]:r[1]] {
					if err := d.Decode(raw); err != nil {
						errs <- err
						return
					}
					if err := parts[i].Put(d); err != nil {
						errs <- err
						return
					}
				}
				errs <- nil
			}()
		}
		for range ranges {
			if err := <-errs; err != nil {
				t.Fatal(err)
			}
		}
		if err := im.SetCheckpoint("cmds", 0, 180); err != nil {
			t.Fatal(err)
		}
		return dst, im.Commit()
	}
	one, err := imp([][2]int{{0, 90}})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := dumpSpaces(t, one), dumpSpaces(t, src); got != want {
		t.Fatalf("one part: imported store differs\nimported:\n%s\nsource:\n%s", got, want)
	}
	for name, ranges := range map[string][][2]int{
		"two":               {{0, 45}, {45, 90}},
		"three, descending": {{60, 90}, {30, 60}, {0, 30}},
		"an empty part":     {{0, 50}, {50, 50}, {50, 90}},
	} {
		t.Run(name, func(t *testing.T) {
			s, err := imp(ranges)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := dumpSpaces(t, s), dumpSpaces(t, one); got != want {
				t.Fatalf("imported in parts differs from one part\nparts:\n%s\none:\n%s", got, want)
			}
			if cp, ok, err := s.Checkpoint("cmds", 0); err != nil || !ok || cp != 180 {
				t.Fatalf("checkpoint %d, %v, %v; want 180", cp, ok, err)
			}
		})
	}
	s, err := imp([][2]int{{0, 50}, {40, 90}})
	if !errors.Is(err, ErrInvalid) {
		t.Fatalf("overlapping parts: Commit = %v, want ErrInvalid", err)
	}
	if got := dumpSpaces(t, s); got != "" {
		t.Fatalf("overlapping parts wrote:\n%s", got)
	}
}
