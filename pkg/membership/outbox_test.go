package membership

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

type outboxEntry struct {
	seq   uint64
	value string
}

// outboxOf returns every committed outbox entry.
func outboxOf(t testing.TB, s *Store) []outboxEntry {
	t.Helper()
	var out []outboxEntry
	if err := s.Outbox(func(seq uint64, value []byte) error {
		out = append(out, outboxEntry{seq, string(value)})
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// addOutbox adds values to one batch, commits it and returns their sequence
// numbers.
func addOutbox(t testing.TB, s *Store, values ...string) []uint64 {
	t.Helper()
	b := s.NewBatch()
	defer b.Close()
	var seqs []uint64
	for _, v := range values {
		seq, err := b.AddOutbox([]byte(v))
		if err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, seq)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	return seqs
}

// reopen closes s and opens the store again on fs.
func reopen(t testing.TB, s *Store, fs vfs.FS) *Store {
	t.Helper()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	return openFS(t, fs, nil)
}

func TestOutbox(t *testing.T) {
	s := openMem(t)
	if got := outboxOf(t, s); len(got) != 0 {
		t.Fatalf("Outbox of a new store: %v", got)
	}
	if got := addOutbox(t, s, "a", "b", "c"); !slices.Equal(got, []uint64{1, 2, 3}) {
		t.Fatalf("seqs = %v", got)
	}
	// The outbox commits with the commands of its batch.
	b := s.NewBatch()
	defer b.Close()
	mustOK(t)(b.Leave(1, 100))
	if seq, err := b.AddOutbox([]byte("d")); err != nil || seq != 4 {
		t.Fatalf("AddOutbox = %d, %v", seq, err)
	}
	if got := outboxOf(t, s); len(got) != 3 {
		t.Fatalf("uncommitted entry listed: %v", got)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	want := []outboxEntry{{1, "a"}, {2, "b"}, {3, "c"}, {4, "d"}}
	if got := outboxOf(t, s); !slices.Equal(got, want) {
		t.Fatalf("Outbox = %v, want %v", got, want)
	}
	if got := addOutbox(t, s, "e"); !slices.Equal(got, []uint64{5}) {
		t.Fatalf("seqs = %v", got)
	}
}

func TestDeleteOutbox(t *testing.T) {
	s := openMem(t)
	addOutbox(t, s, "1", "2", "3", "4", "5")
	for _, tc := range []struct {
		through uint64
		want    []outboxEntry
	}{
		{0, []outboxEntry{{1, "1"}, {2, "2"}, {3, "3"}, {4, "4"}, {5, "5"}}},
		{3, []outboxEntry{{4, "4"}, {5, "5"}}},
		{3, []outboxEntry{{4, "4"}, {5, "5"}}}, // again: nothing more
		{2, []outboxEntry{{4, "4"}, {5, "5"}}},
		{4, []outboxEntry{{5, "5"}}},
		{math.MaxUint64, nil},
	} {
		if err := s.DeleteOutbox(tc.through); err != nil {
			t.Fatal(err)
		}
		if got := outboxOf(t, s); !slices.Equal(got, tc.want) {
			t.Fatalf("after DeleteOutbox(%d): %v, want %v", tc.through, got, tc.want)
		}
	}

	// An entry committed after the delete stays, whatever its number.
	b := s.NewBatch()
	defer b.Close()
	seq, err := b.AddOutbox([]byte("late"))
	if err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteOutbox(seq); err != nil {
		t.Fatal(err)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	if got, want := outboxOf(t, s), []outboxEntry{{seq, "late"}}; !slices.Equal(got, want) {
		t.Fatalf("Outbox = %v, want %v", got, want)
	}
}

// TestOutboxSeqAcrossReopen: numbers keep increasing after every entry was
// deleted and the store reopened, which only the persisted high-water mark
// can ensure.
func TestOutboxSeqAcrossReopen(t *testing.T) {
	fs := vfs.NewMem()
	s := openFS(t, fs, nil)
	addOutbox(t, s, "a", "b", "c")
	if err := s.DeleteOutbox(3); err != nil {
		t.Fatal(err)
	}
	s = reopen(t, s, fs)
	if got := outboxOf(t, s); len(got) != 0 {
		t.Fatalf("Outbox after delete and reopen: %v", got)
	}
	if got := addOutbox(t, s, "d"); !slices.Equal(got, []uint64{4}) {
		t.Fatalf("first seq after reopen = %v, want 4", got)
	}
	// With entries left, too.
	s = reopen(t, s, fs)
	if got := addOutbox(t, s, "e"); !slices.Equal(got, []uint64{5}) {
		t.Fatalf("first seq after reopen = %v, want 5", got)
	}
	// A batch that was never committed leaves a gap; numbers still increase.
	b := s.NewBatch()
	if seq, err := b.AddOutbox([]byte("dropped")); err != nil || seq != 6 {
		t.Fatalf("AddOutbox = %d, %v", seq, err)
	}
	b.Close()
	if got := addOutbox(t, s, "f"); !slices.Equal(got, []uint64{7}) {
		t.Fatalf("seq after a dropped batch = %v, want 7", got)
	}
	if got, want := outboxOf(t, s), []outboxEntry{{4, "d"}, {5, "e"}, {7, "f"}}; !slices.Equal(got, want) {
		t.Fatalf("Outbox = %v, want %v", got, want)
	}
}

// TestOutboxSeqOpen: Open starts after the larger of the high-water mark and
// the last entry.
func TestOutboxSeqOpen(t *testing.T) {
	for _, tc := range []struct {
		name string
		mark []byte // nil: no mark
		want uint64
	}{
		{"no mark", nil, 4},
		{"mark below the last entry", encodeOutboxSeqSlice(2), 4},
		{"mark above the last entry", encodeOutboxSeqSlice(10), 11},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := vfs.NewMem()
			s := openFS(t, fs, nil)
			addOutbox(t, s, "a", "b", "c")
			var err error
			if tc.mark == nil {
				err = s.db.Delete(metaOutboxSeqKey, pebble.Sync)
			} else {
				err = s.db.Set(metaOutboxSeqKey, tc.mark, pebble.Sync)
			}
			if err != nil {
				t.Fatal(err)
			}
			s = reopen(t, s, fs)
			if got := addOutbox(t, s, "d"); !slices.Equal(got, []uint64{tc.want}) {
				t.Fatalf("seq = %v, want %d", got, tc.want)
			}
		})
	}
}

func encodeOutboxSeqSlice(seq uint64) []byte {
	v := encodeOutboxSeq(seq)
	return v[:]
}

// TestOutboxMarkNeverGoesDown: batches that commit in the other order than
// they took their numbers must not lower the high-water mark, or a number
// is handed out twice once the entries are deleted.
func TestOutboxMarkNeverGoesDown(t *testing.T) {
	fs := vfs.NewMem()
	s := openFS(t, fs, nil)
	a, b := s.NewBatch(), s.NewBatch()
	defer a.Close()
	defer b.Close()
	seqA, errA := a.AddOutbox([]byte("a"))
	seqB, errB := b.AddOutbox([]byte("b"))
	if errA != nil || errB != nil || seqA != 1 || seqB != 2 {
		t.Fatalf("AddOutbox = %d, %v; %d, %v", seqA, errA, seqB, errB)
	}
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := a.Commit(); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteOutbox(2); err != nil {
		t.Fatal(err)
	}
	s = reopen(t, s, fs)
	if got := addOutbox(t, s, "c"); !slices.Equal(got, []uint64{3}) {
		t.Fatalf("seq after reopen = %v, want 3", got)
	}
}

// TestOutboxConcurrent adds entries from several goroutines at once: every
// number is handed out once, and a reopened store goes on above all of
// them. Run with -race.
func TestOutboxConcurrent(t *testing.T) {
	fs := vfs.NewMem()
	s := openFS(t, fs, nil)
	const workers, batches, per = 4, 20, 3
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		seqs []uint64
	)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range batches {
				b := s.NewBatch()
				for j := range per {
					seq, err := b.AddOutbox(fmt.Appendf(nil, "%d/%d/%d", w, i, j))
					if err != nil {
						t.Error(err)
					}
					mu.Lock()
					seqs = append(seqs, seq)
					mu.Unlock()
				}
				if err := b.Commit(); err != nil {
					t.Error(err)
				}
				if i%5 == 4 {
					if err := s.DeleteOutbox(uint64(i * workers)); err != nil {
						t.Error(err)
					}
				}
			}
		}()
	}
	wg.Wait()
	slices.Sort(seqs)
	if n := len(slices.Compact(slices.Clone(seqs))); n != workers*batches*per {
		t.Fatalf("%d distinct numbers for %d entries", n, workers*batches*per)
	}
	got := outboxOf(t, s)
	if !slices.IsSortedFunc(got, func(a, b outboxEntry) int { return cmp.Compare(a.seq, b.seq) }) {
		t.Fatalf("Outbox not in sequence order: %v", got)
	}
	if err := s.DeleteOutbox(math.MaxUint64); err != nil {
		t.Fatal(err)
	}
	s = reopen(t, s, fs)
	if got, last := addOutbox(t, s, "x"), seqs[len(seqs)-1]; got[0] <= last {
		t.Fatalf("seq after reopen = %d, not above %d", got[0], last)
	}
}

func TestAddOutboxInvalid(t *testing.T) {
	s := openMem(t)
	b := s.NewBatch()
	defer b.Close()
	for _, v := range [][]byte{nil, {}, make([]byte, MaxOutboxValueLen+1)} {
		if _, err := b.AddOutbox(v); !errors.Is(err, ErrInvalid) {
			t.Errorf("AddOutbox with %d bytes = %v, want ErrInvalid", len(v), err)
		}
	}
	if !b.pb.Empty() {
		t.Fatalf("refused entries staged %d bytes", b.pb.Len())
	}
	big := bytes.Repeat([]byte{7}, MaxOutboxValueLen)
	v := []byte("copied")
	for _, value := range [][]byte{big, v} {
		if _, err := b.AddOutbox(value); err != nil {
			t.Fatalf("AddOutbox with %d bytes: %v", len(value), err)
		}
	}
	v[0] = 'X' // after AddOutbox, before Commit
	if err := b.Commit(); err != nil {
		t.Fatal(err)
	}
	got := outboxOf(t, s)
	if len(got) != 2 || got[0].value != string(big) || got[1].value != "copied" {
		t.Fatalf("Outbox has %d entries; second %q", len(got), got[len(got)-1].value)
	}
	if _, err := b.AddOutbox([]byte("x")); !errors.Is(err, ErrBatchDone) {
		t.Fatalf("AddOutbox after Commit: %v", err)
	}
}

func TestOutboxStops(t *testing.T) {
	s := openMem(t)
	addOutbox(t, s, "a", "b", "c")
	stop := errors.New("stop")
	var seen []uint64
	err := s.Outbox(func(seq uint64, _ []byte) error {
		seen = append(seen, seq)
		if seq == 2 {
			return stop
		}
		return nil
	})
	if !errors.Is(err, stop) || !strings.Contains(err.Error(), "entry 2") || !slices.Equal(seen, []uint64{1, 2}) {
		t.Fatalf("Outbox = %v after %v", err, seen)
	}
}

func TestOutboxCorrupt(t *testing.T) {
	for _, tc := range []struct {
		name       string
		key, value []byte
	}{
		{"empty value", appendOutboxKey(nil, 9), nil},
		{"value too long", appendOutboxKey(nil, 9), make([]byte, MaxOutboxValueLen+1)},
		{"short key", []byte{spaceOutbox, 1, 2, 3}, []byte("x")},
		{"seq 0", appendOutboxKey(nil, 0), []byte("x")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := vfs.NewMem()
			s := openFS(t, fs, nil)
			addOutbox(t, s, "a")
			if err := s.db.Set(tc.key, tc.value, pebble.Sync); err != nil {
				t.Fatal(err)
			}
			err := s.Outbox(func(uint64, []byte) error { return nil })
			var ce *CorruptError
			if !errors.As(err, &ce) || !bytes.Equal(ce.Key, tc.key) {
				t.Fatalf("Outbox: %v, want ErrCorrupt at %x", err, tc.key)
			}
		})
	}
	// Open reads the mark and the last key, and refuses them corrupt.
	for _, tc := range []struct {
		name       string
		key, value []byte
	}{
		{"short mark", metaOutboxSeqKey, []byte{1, 2, 3}},
		{"bad last key", []byte{spaceOutbox, 0xff}, []byte("x")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := vfs.NewMem()
			s := openFS(t, fs, nil)
			if err := s.db.Set(tc.key, tc.value, pebble.Sync); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			_, err := Open("db", &Options{FS: fs})
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), fmt.Sprintf("%x", tc.key)) {
				t.Fatalf("Open: %v, want ErrCorrupt naming %x", err, tc.key)
			}
		})
	}
}
