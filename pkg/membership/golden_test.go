package membership

import (
	"bufio"
	"bytes"
	"encoding/hex"
	"os"
	"strconv"
	"strings"
	"testing"
)

type goldenRecord struct {
	line       int
	kind       string
	fields     map[string]string
	key, value []byte
}

func readGolden(t *testing.T, path string) []goldenRecord {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var out []goldenRecord
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		words := strings.Fields(line)
		r := goldenRecord{line: n, kind: words[0], fields: map[string]string{}}
		for _, w := range words[1:] {
			k, v, ok := strings.Cut(w, "=")
			if !ok {
				t.Fatalf("%s:%d: bad field %q", path, n, w)
			}
			r.fields[k] = v
		}
		if r.key, err = hex.DecodeString(r.fields["key"]); err != nil {
			t.Fatalf("%s:%d: key: %v", path, n, err)
		}
		if r.value, err = hex.DecodeString(r.fields["value"]); err != nil {
			t.Fatalf("%s:%d: value: %v", path, n, err)
		}
		out = append(out, r)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func (r goldenRecord) u64(t *testing.T, name string) uint64 {
	t.Helper()
	v, err := strconv.ParseUint(r.fields[name], 10, 64)
	if err != nil {
		t.Fatalf("line %d: %s: %v", r.line, name, err)
	}
	return v
}

// TestGoldenRecords encodes every record of testdata/records.golden, compares
// it byte by byte, and decodes the golden bytes back to the same fields.
func TestGoldenRecords(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range readGolden(t, "testdata/records.golden") {
		seen[r.kind] = true
		var key, value []byte
		switch r.kind {
		case "format":
			v := encodeFormat(uint32(r.u64(t, "version")))
			key, value = metaFormatKey, v[:]
			got, err := decodeFormat(r.key, r.value)
			if err != nil || uint64(got) != r.u64(t, "version") {
				t.Errorf("line %d: decodeFormat = %d, %v", r.line, got, err)
			}
		case "state":
			m := CommunityMembership{UserID: r.u64(t, "user"), LeftAtNs: r.u64(t, "left_at")}
			switch r.fields["status"] {
			case "active":
				m.Status = Active
			case "left":
				m.Status = Left
			default:
				t.Fatalf("line %d: status %q", r.line, r.fields["status"])
			}
			v := encodeState(m)
			key, value = appendStateKey(nil, m.UserID), v[:]
			got, err := decodeState(r.key, r.value)
			if err != nil || got != m {
				t.Errorf("line %d: decodeState = %+v, %v; want %+v", r.line, got, err, m)
			}
			if got.Status.String() != r.fields["status"] {
				t.Errorf("line %d: status %v", r.line, got.Status)
			}
		case "history":
			user, e := r.u64(t, "user"), Episode{r.u64(t, "left_at"), r.u64(t, "rejoined_at")}
			v := encodeHistory(e)
			key, value = appendHistoryKey(nil, user, e.LeftAtNs), v[:]
			gotUser, got, err := decodeHistory(r.key, r.value)
			if err != nil || gotUser != user || got != e {
				t.Errorf("line %d: decodeHistory = %d, %+v, %v", r.line, gotUser, got, err)
			}
		case "late_leave":
			user, w := r.u64(t, "user"), LateLeave{LeftAtNs: r.u64(t, "left_at"), ForwardedThroughNs: r.u64(t, "through"), Exact: r.u64(t, "exact") == 1}
			v := encodeLateLeave(w)
			key, value = appendLateLeaveKey(nil, user, w.LeftAtNs), v[:]
			gotUser, got, err := decodeLateLeave(r.key, r.value)
			if err != nil || gotUser != user || got != w {
				t.Errorf("line %d: decodeLateLeave = %d, %+v, %v", r.line, gotUser, got, err)
			}
		case "note":
			user, text := r.u64(t, "user"), r.fields["text"]
			key, value = appendNoteKey(nil, user), []byte(text)
			gotUser, got, err := decodeNote(r.key, r.value)
			if err != nil || gotUser != user || string(got) != text {
				t.Errorf("line %d: decodeNote = %d, %q, %v", r.line, gotUser, got, err)
			}
		case "outbox":
			seq, text := r.u64(t, "seq"), r.fields["text"]
			key, value = appendOutboxKey(nil, seq), []byte(text)
			got, err := decodeOutboxKey(r.key)
			if err == nil {
				err = checkOutboxValue(r.key, r.value)
			}
			if err != nil || got != seq || string(r.value) != text {
				t.Errorf("line %d: decodeOutboxKey = %d, %v", r.line, got, err)
			}
		case "identity":
			c := Command{UserID: r.u64(t, "user"), AtNs: r.u64(t, "at"), RequestID: r.fields["request_id"]}
			switch r.fields["op"] {
			case "leave":
				c.Op = OpLeave
			case "rejoin":
				c.Op = OpRejoin
			default:
				t.Fatalf("line %d: op %q", r.line, r.fields["op"])
			}
			seq, refused := r.u64(t, "seq"), accepted
			switch r.fields["refused"] {
			case "true", "before-leave":
				refused = refusedBeforeLeave
			case "history-full":
				refused = refusedFull
			}
			key, value = appendIdentityKey(nil, c), appendIdentityValue(nil, seq, refused)
			if r.fields["legacy"] == "true" {
				value = []byte{}
			}
			gotSeq, gotRefused, err := decodeIdentityValue(r.value)
			if err != nil || gotSeq != seq || gotRefused != refused {
				t.Errorf("line %d: decodeIdentityValue = %d, %v, %v", r.line, gotSeq, gotRefused, err)
			}
		case "outbox-seq":
			v := encodeOutboxSeq(r.u64(t, "last"))
			key, value = metaOutboxSeqKey, v[:]
			got, err := decodeOutboxSeq(r.key, r.value)
			if err != nil || got != r.u64(t, "last") {
				t.Errorf("line %d: decodeOutboxSeq = %d, %v", r.line, got, err)
			}
		case "checkpoint":
			topic, partition, next := r.fields["topic"], int32(r.u64(t, "partition")), int64(r.u64(t, "next"))
			v := encodeCheckpoint(next)
			key, value = appendCheckpointKey(nil, topic, partition), v[:]
			gotTopic, gotPartition, err := decodeCheckpointKey(r.key)
			if err != nil || gotTopic != topic || gotPartition != partition {
				t.Errorf("line %d: decodeCheckpointKey = %q, %d, %v", r.line, gotTopic, gotPartition, err)
			}
			gotNext, err := decodeCheckpointValue(r.key, r.value)
			if err != nil || gotNext != next {
				t.Errorf("line %d: decodeCheckpointValue = %d, %v", r.line, gotNext, err)
			}
		default:
			t.Fatalf("line %d: unknown kind %q", r.line, r.kind)
		}
		if !bytes.Equal(key, r.key) {
			t.Errorf("line %d: %s key\n got %x\nwant %x", r.line, r.kind, key, r.key)
		}
		if !bytes.Equal(value, r.value) {
			t.Errorf("line %d: %s value\n got %x\nwant %x", r.line, r.kind, value, r.value)
		}
	}
	for _, kind := range []string{"format", "outbox-seq", "state", "history", "late_leave", "note", "checkpoint", "outbox", "identity"} {
		if !seen[kind] {
			t.Errorf("testdata/records.golden has no %s record", kind)
		}
	}
}

// TestGoldenStore runs a script of commands through a real store and compares
// every byte of the resulting key space with testdata/store.golden.
func TestGoldenStore(t *testing.T) {
	const (
		t1 = 1764633600000000000 // 2025-12-02T00:00:00Z
		t2 = t1 + 3600e9
		t3 = t2 + 3600e9
	)
	s := openMem(t)
	must := mustOK(t)
	must(s.Leave(42, t1))
	must(s.Rejoin(42, t2))
	if c := must(s.Leave(42, t1)); c.Changed { // the first leave delivered again
		t.Fatalf("repeated leave of a closed episode changed the member: %+v", c)
	}
	must(s.Leave(42, t3))
	must(s.Leave(7, t2))
	must(s.Leave(7, t1)) // the earliest boundary wins
	must(s.Leave(9, t2))
	must(s.Rejoin(9, t3))
	must(s.Leave(9, t1)) // clamped to t3
	must(s.Apply(Command{Op: OpLeave, UserID: 11, AtNs: t1, RequestID: "r-1"}))
	must(s.Rejoin(11, t1)) // the empty episode [t1, t1)
	b := s.NewBatch()
	defer b.Close()
	must(b.Leave(0x0102030405060708, 1))
	must(b.Rejoin(0x0102030405060708, 2))
	for _, cp := range []struct {
		p    int32
		next int64
	}{{3, 1234}, {0, 7}} {
		if err := b.SetCheckpoint("membership.commands", cp.p, cp.next); err != nil {
			t.Fatal(err)
		}
	}
	for _, err := range []error{
		b.RecordLateLeave(42, LateLeave{LeftAtNs: t3, ForwardedThroughNs: t3 + 60e9, Exact: true}),
		b.RecordLateLeave(42, LateLeave{LeftAtNs: t3, ForwardedThroughNs: t3 + 1}), // keeps the larger window, not exact
		b.SetNote(0x0102030405060708, []byte(`{"op":"leave"}`)),
		b.SetNote(0x0102030405060708, []byte(`{"op":"rejoin","request_id":"r-1"}`)), // the last note wins
		b.SetNote(5, []byte("n")), // a user who never left
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	if seq, err := b.AddOutbox([]byte("hello")); err != nil || seq != 1 {
		t.Fatalf("AddOutbox = %d, %v; want 1", seq, err)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	b = s.NewBatch()
	defer b.Close()
	if seq, err := b.AddOutbox([]byte("n")); err != nil || seq != 2 {
		t.Fatalf("AddOutbox = %d, %v; want 2", seq, err)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteOutbox(1); err != nil {
		t.Fatal(err)
	}

	want, err := os.ReadFile("testdata/store.golden")
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, l := range strings.Split(string(want), "\n") {
		if l != "" && !strings.HasPrefix(l, "#") {
			lines = append(lines, l)
		}
	}
	if got, want := dump(t, s), strings.Join(lines, "\n")+"\n"; got != want {
		t.Fatalf("store bytes differ\n got:\n%s\nwant:\n%s", got, want)
	}
}
