package membership

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"errors"
	"slices"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Seed corpora are in testdata/fuzz/<FuzzName>/. Every decoder target checks
// two things: a decoder never panics and fails only with ErrCorrupt, and what
// it accepts encodes back to exactly the same bytes (it never guesses).

// checkCorrupt fails t if err is set but is not a *CorruptError naming key.
func checkCorrupt(t *testing.T, key []byte, err error) {
	t.Helper()
	var ce *CorruptError
	if !errors.As(err, &ce) || !errors.Is(err, ErrCorrupt) {
		t.Fatalf("error is not a CorruptError: %v", err)
	}
	if !bytes.Equal(ce.Key, key) {
		t.Fatalf("error names key %x, want %x", ce.Key, key)
	}
}

func FuzzDecodeUserKey(f *testing.F) {
	f.Fuzz(func(t *testing.T, key []byte) {
		userID, kind, leftAtNs, err := decodeUserKey(key)
		if err != nil {
			checkCorrupt(t, key, err)
			return
		}
		var got []byte
		switch kind {
		case kindState:
			got = appendStateKey(nil, userID)
		case kindHistory:
			got = appendHistoryKey(nil, userID, leftAtNs)
		case kindLateLeave:
			got = appendLateLeaveKey(nil, userID, leftAtNs)
		case kindNote:
			got = appendNoteKey(nil, userID)
		default:
			t.Fatalf("kind %d", kind)
		}
		if !bytes.Equal(got, key) {
			t.Fatalf("decoded %x as user %d kind %d left_at %d, which encodes as %x", key, userID, kind, leftAtNs, got)
		}
	})
}

func FuzzDecodeState(f *testing.F) {
	f.Fuzz(func(t *testing.T, key, value []byte) {
		m, err := decodeState(key, value)
		if err != nil {
			checkCorrupt(t, key, err)
			return
		}
		if m.Status != Active && m.Status != Left {
			t.Fatalf("accepted status %d", m.Status)
		}
		if m.Status == Active && m.LeftAtNs != 0 {
			t.Fatalf("accepted active with left_at %d", m.LeftAtNs)
		}
		v := encodeState(m)
		if k := appendStateKey(nil, m.UserID); !bytes.Equal(k, key) || !bytes.Equal(v[:], value) {
			t.Fatalf("decoded %x=%x as %+v, which encodes as %x=%x", key, value, m, k, v)
		}
	})
}

func FuzzDecodeHistory(f *testing.F) {
	f.Fuzz(func(t *testing.T, key, value []byte) {
		userID, e, err := decodeHistory(key, value)
		if err != nil {
			checkCorrupt(t, key, err)
			return
		}
		if e.RejoinedAtNs < e.LeftAtNs || e.IsOpen() {
			t.Fatalf("accepted episode %+v", e)
		}
		v := encodeHistory(e)
		if k := appendHistoryKey(nil, userID, e.LeftAtNs); !bytes.Equal(k, key) || !bytes.Equal(v[:], value) {
			t.Fatalf("decoded %x=%x as user %d %+v, which encodes as %x=%x", key, value, userID, e, k, v)
		}
	})
}

func FuzzDecodeLateLeave(f *testing.F) {
	f.Fuzz(func(t *testing.T, key, value []byte) {
		userID, w, err := decodeLateLeave(key, value)
		if err != nil {
			checkCorrupt(t, key, err)
			return
		}
		if w.ForwardedThroughNs < w.LeftAtNs {
			t.Fatalf("accepted window %+v", w)
		}
		v := encodeLateLeave(w)
		if k := appendLateLeaveKey(nil, userID, w.LeftAtNs); !bytes.Equal(k, key) || !bytes.Equal(v[:], value) {
			t.Fatalf("decoded %x=%x as user %d %+v, which encodes as %x=%x", key, value, userID, w, k, v)
		}
	})
}

func FuzzDecodeNote(f *testing.F) {
	f.Fuzz(func(t *testing.T, key, value []byte) {
		userID, note, err := decodeNote(key, value)
		if err != nil {
			checkCorrupt(t, key, err)
			return
		}
		if err := validNote(userID, note); err != nil {
			t.Fatalf("decoded a note that cannot be written: %v", err)
		}
		if k := appendNoteKey(nil, userID); !bytes.Equal(k, key) || !bytes.Equal(note, value) {
			t.Fatalf("decoded %x=%x as user %d note %x, which encodes as %x=%x", key, value, userID, note, k, note)
		}
	})
}

func FuzzDecodeOutbox(f *testing.F) {
	f.Fuzz(func(t *testing.T, key, value []byte) {
		seq, err := decodeOutboxKey(key)
		if err != nil {
			checkCorrupt(t, key, err)
			return
		}
		if k := appendOutboxKey(nil, seq); seq == 0 || !bytes.Equal(k, key) {
			t.Fatalf("decoded %x as entry %d, which encodes as %x", key, seq, k)
		}
		if err := checkOutboxValue(key, value); err != nil {
			checkCorrupt(t, key, err)
			return
		}
		if err := validOutboxValue(value); err != nil {
			t.Fatalf("accepted an entry of %d bytes that cannot be written: %v", len(value), err)
		}
	})
}

func FuzzDecodeOutboxSeq(f *testing.F) {
	f.Fuzz(func(t *testing.T, key, value []byte) {
		seq, err := decodeOutboxSeq(key, value)
		if err != nil {
			checkCorrupt(t, key, err)
			return
		}
		if v := encodeOutboxSeq(seq); !bytes.Equal(key, metaOutboxSeqKey) || !bytes.Equal(v[:], value) {
			t.Fatalf("decoded %x=%x as %d", key, value, seq)
		}
	})
}

func FuzzDecodeCheckpoint(f *testing.F) {
	f.Fuzz(func(t *testing.T, key, value []byte) {
		topic, partition, err := decodeCheckpointKey(key)
		if err != nil {
			checkCorrupt(t, key, err)
			return
		}
		if err := validCheckpoint(topic, partition); err != nil {
			t.Fatalf("decoded key %x as a checkpoint that cannot be written: %v", key, err)
		}
		if k := appendCheckpointKey(nil, topic, partition); !bytes.Equal(k, key) {
			t.Fatalf("decoded %x as %q/%d, which encodes as %x", key, topic, partition, k)
		}
		next, err := decodeCheckpointValue(key, value)
		if err != nil {
			checkCorrupt(t, key, err)
			return
		}
		if v := encodeCheckpoint(next); next < 0 || !bytes.Equal(v[:], value) {
			t.Fatalf("decoded %x as %d, which encodes as %x", value, next, v)
		}
	})
}

func FuzzDecodeFormat(f *testing.F) {
	f.Fuzz(func(t *testing.T, key, value []byte) {
		v, err := decodeFormat(key, value)
		if err != nil {
			checkCorrupt(t, key, err)
			return
		}
		if enc := encodeFormat(v); !bytes.Equal(key, metaFormatKey) || !bytes.Equal(enc[:], value) {
			t.Fatalf("decoded %x=%x as %d", key, value, v)
		}
	})
}

// FuzzAssemble feeds arbitrary records of the users key space to the code
// that builds members from them (Restore and Member). data is a list of
// records, each a length-prefixed key and a length-prefixed value; they are
// sorted and deduplicated as Pebble would deliver them. When the whole list
// is accepted, the members must satisfy every invariant and encode back to
// exactly the records given.
func FuzzAssemble(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		type record struct{ key, value []byte }
		var recs []record
		for len(data) > 0 {
			var r record
			r.key, data = cut(data)
			r.value, data = cut(data)
			recs = append(recs, r)
		}
		slices.SortStableFunc(recs, func(a, b record) int { return bytes.Compare(a.key, b.key) })
		recs = slices.CompactFunc(recs, func(a, b record) bool { return bytes.Equal(a.key, b.key) })

		var members []Member
		a := assembler{emit: func(m *Member) error {
			members = append(members, cloneMember(*m))
			return nil
		}}
		for _, r := range recs {
			if err := a.add(r.key, r.value); err != nil {
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("error is not ErrCorrupt: %v", err)
				}
				return
			}
		}
		if err := a.finish(); err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error is not ErrCorrupt: %v", err)
			}
			return
		}

		var again []record
		for i, m := range members {
			if i > 0 && m.UserID <= members[i-1].UserID {
				t.Fatalf("members out of order: %d after %d", m.UserID, members[i-1].UserID)
			}
			checkMemberInvariants(t, m)
			if m.Status == Left || len(m.History) > 0 {
				sv := encodeState(m.CommunityMembership)
				again = append(again, record{appendStateKey(nil, m.UserID), sv[:]})
			} else if m.Note == nil || len(m.LateLeaves) > 0 {
				t.Fatalf("user %d: member without a current state: %+v", m.UserID, m)
			}
			for _, e := range m.History {
				hv := encodeHistory(e)
				again = append(again, record{appendHistoryKey(nil, m.UserID, e.LeftAtNs), hv[:]})
			}
			for _, w := range m.LateLeaves {
				wv := encodeLateLeave(w)
				again = append(again, record{appendLateLeaveKey(nil, m.UserID, w.LeftAtNs), wv[:]})
			}
			if m.Note != nil {
				again = append(again, record{appendNoteKey(nil, m.UserID), m.Note})
			}
		}
		if !slices.EqualFunc(recs, again, func(a, b record) bool {
			return bytes.Equal(a.key, b.key) && bytes.Equal(a.value, b.value)
		}) {
			t.Fatalf("accepted records do not round-trip:\n got %x\nwant %x", again, recs)
		}
	})
}

// checkMemberInvariants fails t if m breaks an invariant of the package
// documentation that a single member can show.
func checkMemberInvariants(t *testing.T, m Member) {
	t.Helper()
	eps := m.Episodes(nil)
	for j, e := range eps {
		if e.RejoinedAtNs < e.LeftAtNs || (j > 0 && (e.LeftAtNs < eps[j-1].RejoinedAtNs || e.LeftAtNs == eps[j-1].LeftAtNs)) {
			t.Fatalf("user %d: bad episodes %v", m.UserID, eps)
		}
	}
	if m.Status == Active && len(m.History) == 0 && len(m.LateLeaves) > 0 {
		t.Fatalf("user %d: late leaves without a leave: %+v", m.UserID, m)
	}
	for j, w := range m.LateLeaves {
		if w.ForwardedThroughNs < w.LeftAtNs || (j > 0 && w.LeftAtNs <= m.LateLeaves[j-1].LeftAtNs) {
			t.Fatalf("user %d: bad late leaves %v", m.UserID, m.LateLeaves)
		}
		if !slices.ContainsFunc(eps, func(e Episode) bool { return e.LeftAtNs == w.LeftAtNs }) {
			t.Fatalf("user %d: late leave %+v starts at no episode of %v", m.UserID, w, eps)
		}
	}
	if m.Note != nil && (len(m.Note) == 0 || len(m.Note) > MaxNoteLen) {
		t.Fatalf("user %d: note of %d bytes", m.UserID, len(m.Note))
	}
}

// cloneMember returns a copy of m that shares no memory with it.
func cloneMember(m Member) Member {
	m.History = slices.Clone(m.History)
	m.LateLeaves = slices.Clone(m.LateLeaves)
	m.Note = bytes.Clone(m.Note)
	return m
}

// cut splits a length-prefixed field off data; a short field takes what is
// left.
func cut(data []byte) (field, rest []byte) {
	if len(data) == 0 {
		return nil, nil
	}
	n := min(int(data[0]), len(data)-1)
	return data[1 : 1+n], data[1+n:]
}

// FuzzCommands applies an arbitrary sequence of commands and other calls to
// a store and checks the package's invariants after every one: episodes stay
// non-empty, disjoint and ascending, history is never rewritten, a repeated
// command changes nothing, a leave again of a closed episode is a no-op and
// any other leave of an Active user is not, late-leave windows keep the
// larger end, outbox sequence numbers strictly increase across deletes and
// reopens, and what was written reads back, by Member, Restore and Outbox,
// as the model says.
//
// data is 9 bytes a step: a control byte, then atNs as u64 LE. Control bits
// 3-4 choose the kind of step:
//
//	0  bit 0 leave/rejoin, bits 1-2 user (of 4)
//	1  RecordLateLeave, bits 1-2 user, bits 5-7 which episode (7: at atNs)
//	2  SetNote, bits 1-2 user, bits 5-7 == 7: an empty note
//	3  bits 0-2: 0-2 AddOutbox and commit, 3 AddOutbox and close (the
//	   number is lost), 4-5 DeleteOutbox, 6-7 close and reopen the store
func FuzzCommands(f *testing.F) {
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) > 9*64 {
			return // long sequences add time, not coverage
		}
		fs := vfs.NewMem()
		s := openFS(t, fs, nil)
		want := map[uint64]Member{}
		get := func(user uint64) Member {
			if m, ok := want[user]; ok {
				return m
			}
			return Member{CommunityMembership: CommunityMembership{UserID: user}}
		}
		type entry struct {
			seq   uint64
			value []byte
		}
		var (
			outbox  []entry
			lastSeq uint64 // the last number handed out
			mark    uint64 // the high-water mark the store has committed
		)
		for ; len(data) >= 9; data = data[9:] {
			ctl := data[0]
			user := uint64(ctl>>1) & 3
			at := binary.LittleEndian.Uint64(data[1:9])
			switch ctl >> 3 & 3 {
			case 0:
				if c, ok := fuzzCommand(t, s, OpLeave+Op(ctl&1), user, at); ok {
					want[user] = c.After
				}
			case 1:
				m := cloneMember(get(user))
				eps := m.Episodes(nil)
				left, through := at, at
				if i := int(ctl >> 5); i < 7 && len(eps) > 0 {
					left = eps[i%len(eps)].LeftAtNs
				}
				exact := ctl>>5&1 == 1
				b := s.NewBatch()
				err := b.RecordLateLeave(user, LateLeave{LeftAtNs: left, ForwardedThroughNs: through, Exact: exact})
				start, inEpisode := m.episodeStart(left)
				if through < left || !inEpisode {
					if !errors.Is(err, ErrInvalid) || !b.pb.Empty() {
						t.Fatalf("RecordLateLeave(%d, %d, %d) on %+v: %v; want ErrInvalid", user, left, through, m, err)
					}
					b.Close()
					continue
				}
				if err != nil {
					t.Fatalf("RecordLateLeave(%d, %d, %d) on %+v: %v", user, left, through, m, err)
				}
				// Again: no bytes.
				n := b.pb.Len()
				if err := b.RecordLateLeave(user, LateLeave{LeftAtNs: left, ForwardedThroughNs: through, Exact: exact}); err != nil || b.pb.Len() != n {
					t.Fatalf("RecordLateLeave repeated: %v, batch grew from %d to %d bytes", err, n, b.pb.Len())
				}
				if err := b.Commit(); err != nil {
					t.Fatal(err)
				}
				// The window goes to the start of the episode holding left, merged.
				i, found := slices.BinarySearchFunc(m.LateLeaves, start, func(w LateLeave, ns uint64) int { return cmp.Compare(w.LeftAtNs, ns) })
				if found {
					m.LateLeaves[i].ForwardedThroughNs = max(m.LateLeaves[i].ForwardedThroughNs, through)
					m.LateLeaves[i].Exact = m.LateLeaves[i].Exact && exact
				} else {
					m.LateLeaves = slices.Insert(m.LateLeaves, i, LateLeave{LeftAtNs: start, ForwardedThroughNs: through, Exact: exact})
				}
				want[user] = m
			case 2:
				note := data[1 : 2+at%8]
				if ctl>>5 == 7 {
					note = nil
				}
				b := s.NewBatch()
				err := b.SetNote(user, note)
				if note == nil {
					if !errors.Is(err, ErrInvalid) {
						t.Fatalf("SetNote(%d, nil): %v", user, err)
					}
					b.Close()
					continue
				}
				if err != nil {
					t.Fatal(err)
				}
				if err := b.Commit(); err != nil {
					t.Fatal(err)
				}
				m := cloneMember(get(user))
				m.Note = bytes.Clone(note)
				want[user] = m
			case 3:
				switch sub := ctl & 7; {
				case sub <= 3:
					b := s.NewBatch()
					seq, err := b.AddOutbox(data[1:9])
					// Numbers follow on within a life of the store, and are
					// never those of a committed entry.
					if err != nil || seq != lastSeq+1 || seq <= mark {
						t.Fatalf("AddOutbox = %d, %v; last was %d, committed mark %d", seq, err, lastSeq, mark)
					}
					lastSeq = seq
					if sub == 3 {
						b.Close()
						continue
					}
					if err := b.Commit(); err != nil {
						t.Fatal(err)
					}
					mark = lastSeq
					outbox = append(outbox, entry{seq, bytes.Clone(data[1:9])})
				case sub <= 5:
					through := at % (lastSeq + 2)
					if err := s.DeleteOutbox(through); err != nil {
						t.Fatal(err)
					}
					outbox = slices.DeleteFunc(outbox, func(e entry) bool { return e.seq <= through })
				default:
					if err := s.Close(); err != nil {
						t.Fatal(err)
					}
					s = openFS(t, fs, nil)
					// Numbers of entries never committed may come again.
					lastSeq = mark
				}
				continue
			}
			if got, err := s.Member(user); err != nil || !equalMember(got, get(user)) {
				t.Fatalf("Member(%d) = %+v, %v; want %+v", user, got, err, get(user))
			}
		}
		n := 0
		_, err := s.Restore(context.Background(), func(m Member) error {
			if w, ok := want[m.UserID]; !ok || !equalMember(m, w) {
				t.Fatalf("Restore: %+v, want %+v", m, w)
			}
			checkMemberInvariants(t, m)
			n++
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		records := 0
		for _, m := range want {
			if m.Status == Left || len(m.History) > 0 || m.Note != nil {
				records++
			}
		}
		if n != records {
			t.Fatalf("Restore delivered %d members, want %d", n, records)
		}
		var got []entry
		if err := s.Outbox(func(seq uint64, value []byte) error {
			got = append(got, entry{seq, bytes.Clone(value)})
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		if !slices.EqualFunc(got, outbox, func(a, b entry) bool { return a.seq == b.seq && bytes.Equal(a.value, b.value) }) {
			t.Fatalf("Outbox = %v, want %v", got, outbox)
		}
	})
}

// fuzzCommand applies op in a batch of its own, checks it, and returns what
// it did, or false if it was refused (as it may be).
func fuzzCommand(t *testing.T, s *Store, op Op, user, at uint64) (Change, bool) {
	t.Helper()
	b := s.NewBatch()
	defer b.Close()
	c, err := b.Apply(Command{Op: op, UserID: user, AtNs: at})
	if err != nil {
		if !errors.Is(err, ErrRejoinBeforeLeave) && !errors.Is(err, ErrInvalid) {
			t.Fatalf("%v user %d at %d: %v", op, user, at, err)
		}
		return Change{}, false
	}
	// The same command again, in the same batch, is a duplicate.
	c2, err := b.Apply(Command{Op: op, UserID: user, AtNs: at})
	if err != nil || c2.Changed || !c2.Duplicate || !equalMember(c2.After, c.After) {
		t.Fatalf("%v user %d at %d repeated: %+v, %v", op, user, at, c2, err)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	// A new leave of an Active user always opens an episode.
	if op == OpLeave && c.Before.Status == Active && !c.Duplicate && !c.Changed {
		t.Fatalf("leave of active user %d at %d changed nothing: %+v", user, at, c)
	}
	// History is append-only, but for a reopened empty last episode.
	kept := c.Before.History
	if c.Reopened != nil {
		n := len(kept)
		if n == 0 || kept[n-1] != *c.Reopened || !c.Reopened.IsEmpty() || c.After.LeftAtNs != c.Reopened.LeftAtNs {
			t.Fatalf("reopened %+v of history %v, now left at %d", c.Reopened, kept, c.After.LeftAtNs)
		}
		kept = kept[:n-1]
	}
	if len(c.After.History) < len(kept) || !slices.Equal(c.After.History[:len(kept)], kept) {
		t.Fatalf("history rewritten: %v -> %v", c.Before.History, c.After.History)
	}
	// Late leaves change only by following a boundary that moved back.
	if c.MovedFrom == 0 && !slices.Equal(c.After.LateLeaves, c.Before.LateLeaves) || !bytes.Equal(c.After.Note, c.Before.Note) {
		t.Fatalf("command changed late leaves or note: %+v", c)
	}
	if c.MovedFrom != 0 && (c.Before.Status != Left || c.After.LeftAtNs >= c.MovedFrom || c.MovedFrom != c.Before.LeftAtNs) {
		t.Fatalf("leave moved from %d: %+v", c.MovedFrom, c)
	}
	checkMemberInvariants(t, c.After)
	return c, true
}

// equalMember is reflect.DeepEqual without the nil/empty slice distinction.
func equalMember(a, b Member) bool {
	return a.CommunityMembership == b.CommunityMembership && slices.Equal(a.History, b.History) &&
		slices.Equal(a.LateLeaves, b.LateLeaves) && bytes.Equal(a.Note, b.Note)
}

// FuzzDecodeDump: a dump either decodes into a member that Restore would
// hand back, or fails with ErrCorrupt; it never panics.
func FuzzDecodeDump(f *testing.F) {
	f.Add([]byte{dumpVersion, 0, 0, 0, 0, 0, 0, 0, 1, 0, 0})
	f.Add([]byte{dumpVersion, 0, 0, 0, 0, 0, 0, 0, 7, 1, 1, TagCommunityLeave, 9, 1, 100, 0, 0, 0, 0, 0, 0, 0, 1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16})
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := DecodeDump(b)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("DecodeDump: %v, not ErrCorrupt", err)
			}
			return
		}
		n := 0
		count := func(k, _ []byte) error {
			if binary.BigEndian.Uint64(k[1:9]) != d.Member.UserID {
				t.Fatalf("record of user %d in the dump of user %d", binary.BigEndian.Uint64(k[1:9]), d.Member.UserID)
			}
			n++
			return nil
		}
		var buf [64]byte
		_ = d.each(spaceUsers, buf[:], count)
		_ = d.each(spaceIdentities, buf[:], count)
		if n != d.records+d.Identities {
			t.Fatalf("dump of %d records and %d identities yields %d", d.records, d.Identities, n)
		}
	})
}
