package topics

import (
	"bytes"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

var updateChangelog = flag.Bool("update-changelog", false, "rewrite testdata/changelog.golden")

func u64(v uint64) *uint64 { return &v }

// TestMemberRecordGolden pins the changelog encoding byte for byte: the
// purge job reads it.
func TestMemberRecordGolden(t *testing.T) {
	records := []MemberRecord{
		{UserID: 7, Status: "active"},
		{
			UserID: 18446744073709551615, Status: "left", LeftAtNs: u64(1764633600000000000),
			History:    []Episode{{LeftAtNs: 1700000000000000000, RejoinedAtNs: 1710000000000000000}},
			LateLeaves: []LateLeave{{LeftAtNs: 1764633600000000000, ForwardedThroughNs: 1764633601000000000, Exact: true}},
			Command: &CommandRef{Op: "leave", AtNs: 1764633600000000000, Topic: "membership.commands",
				Partition: 3, Offset: 17, RequestID: "r-1", Changed: true},
			Receipt: &Receipt{AppliedAtNs: 1764633600120000000, SignalsPartition: 3, SignalsOffset: -1},
		},
		{
			UserID: 42, Status: "active",
			History:    []Episode{{LeftAtNs: 5, RejoinedAtNs: 5}},
			LateLeaves: []LateLeave{{LeftAtNs: 5, ForwardedThroughNs: 9}},
			Command:    &CommandRef{Op: "rejoin", AtNs: 5, Topic: "membership.commands", Partition: 0, Offset: 2, Duplicate: true},
			Receipt:    &Receipt{AppliedAtNs: 1, SignalsPartition: 0, SignalsOffset: 12},
		},
	}
	var got bytes.Buffer
	for _, r := range records {
		got.Write(AppendMemberRecord(nil, r))
		got.WriteByte('\n')
	}
	path := filepath.Join("testdata", "changelog.golden")
	if *updateChangelog {
		if err := os.WriteFile(path, got.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got.Bytes(), want) {
		t.Fatalf("encoding changed:\ngot:\n%s\nwant:\n%s", got.Bytes(), want)
	}
	for i, line := range bytes.Split(bytes.TrimSpace(want), []byte("\n")) {
		back, err := DecodeMemberRecord(line)
		if err != nil {
			t.Fatalf("line %d: %v", i+1, err)
		}
		r := records[i]
		if r.History == nil {
			r.History = []Episode{}
		}
		if r.LateLeaves == nil {
			r.LateLeaves = []LateLeave{}
		}
		if !reflect.DeepEqual(back, r) {
			t.Fatalf("line %d: decoded %+v, want %+v", i+1, back, r)
		}
	}
}

func TestDecodeMemberRecordRejects(t *testing.T) {
	for name, in := range map[string]string{
		"empty":           ``,
		"not an object":   `[]`,
		"no user":         `{"status":"active","history":[]}`,
		"bad status":      `{"user_id":1,"status":"gone"}`,
		"left, no bound":  `{"user_id":1,"status":"left"}`,
		"active, bound":   `{"user_id":1,"status":"active","left_at_ns":5}`,
		"negative id":     `{"user_id":-1,"status":"active"}`,
		"fractional id":   `{"user_id":1.5,"status":"active"}`,
		"trailing":        `{"user_id":1,"status":"active"} {}`,
		"wrong type hist": `{"user_id":1,"status":"active","history":{}}`,
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := DecodeMemberRecord([]byte(in)); !errors.Is(err, ErrChangelog) {
				t.Fatalf("DecodeMemberRecord(%q) error = %v, want ErrChangelog", in, err)
			}
		})
	}
}

func TestNoteRoundTrip(t *testing.T) {
	n := Note{Command: &CommandRef{Op: "rejoin", AtNs: 9, Topic: "c", Partition: 1, Offset: 2}, Receipt: &Receipt{AppliedAtNs: 3, SignalsOffset: 4}}
	back, err := DecodeNote(AppendNote(nil, n))
	if err != nil || !reflect.DeepEqual(back, n) {
		t.Fatalf("round trip = %+v, %v; want %+v", back, err, n)
	}
	if _, err := DecodeNote([]byte(`{"command":1}`)); !errors.Is(err, ErrChangelog) {
		t.Fatalf("DecodeNote of a bad note: %v, want ErrChangelog", err)
	}
}

// FuzzDecodeMemberRecord checks that decoding never panics and that an
// accepted record re-encodes to a value that decodes to the same record.
func FuzzDecodeMemberRecord(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeMemberRecord(b)
		if err != nil {
			if !errors.Is(err, ErrChangelog) {
				t.Fatalf("error %v does not wrap ErrChangelog", err)
			}
			return
		}
		again, err := DecodeMemberRecord(AppendMemberRecord(nil, r))
		if err != nil {
			t.Fatalf("re-decoding %+v: %v", r, err)
		}
		if !reflect.DeepEqual(again, r) {
			t.Fatalf("round trip changed the record:\n%+v\n%+v", r, again)
		}
	})
}
