package gate

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
)

// seededMap returns an empty Map whose table has a fixed seed, so that
// its snapshot has fixed bytes.
func seededMap(slots int, seed uint64) *Map {
	m := New()
	m.mu.Lock()
	m.installLocked(newTableSeeded(slots, seed))
	m.mu.Unlock()
	return m
}

func save(t *testing.T, m *Map, label string) []byte {
	t.Helper()
	var buf bytes.Buffer
	n, err := m.Save(&buf, []byte(label))
	if err != nil {
		t.Fatal(err)
	}
	if n != int64(buf.Len()) {
		t.Fatalf("Save returned %d bytes, wrote %d", n, buf.Len())
	}
	return buf.Bytes()
}

func load(m *Map, b []byte, accept func([]byte) error) error {
	return m.Load(bytes.NewReader(b), int64(len(b)), accept)
}

// TestSnapshotHeaderBytes pins every byte of the header, the label and the
// header's checksum, and the layout of the body after them.
func TestSnapshotHeaderBytes(t *testing.T) {
	m := seededMap(64, 0x0123456789abcdef)
	for _, err := range []error{
		m.Set(1, []Episode{{100, OpenEnd}}),              // inline
		m.Set(2, []Episode{{10, 20}, {30, OpenEnd}}),     // history 0, 2 episodes
		m.Set(3, []Episode{{5, 6}}),                      // history 1, 1 episode
		m.Set(4, []Episode{{7, OpenEnd}}), m.Set(4, nil), // used, no episodes
		m.Set(5, []Episode{{math.MaxUint64 - 1, OpenEnd}}), // history 2: too large to inline
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	b := save(t, m, "LBL")
	want := []byte{
		'c', 'g', 'G', 'A', 'T', 'E', 's', 'n', // magic
		1, 0, 0, 0, // version
		3, 0, 0, 0, // label length
		4, 0, 0, 0, 0, 0, 0, 0, // members: 1, 2, 3, 5
		64, 0, 0, 0, 0, 0, 0, 0, // slots
		5, 0, 0, 0, 0, 0, 0, 0, // used: 1 to 5
		0xef, 0xcd, 0xab, 0x89, 0x67, 0x45, 0x23, 0x01, // seed
		3, 0, 0, 0, 0, 0, 0, 0, // histories
		4, 0, 0, 0, 0, 0, 0, 0, // episodes: 2 + 1 + 1
		'L', 'B', 'L', // label
	}
	if !bytes.Equal(b[:len(want)], want) {
		t.Fatalf("header and label:\n got % x\nwant % x", b[:len(want)], want)
	}
	sum := binary.LittleEndian.Uint32(b[len(want):])
	if c := crc32.Checksum(want, castagnoli); sum != c {
		t.Fatalf("header checksum %08x, want crc32c of the header and label %08x", sum, c)
	}
	body := b[len(want)+4:]
	const slots, filter = 64 * 16, 64
	histories := (4 + 2*16) + (4 + 16) + (4 + 16)
	if len(body) != slots+filter+histories+4 {
		t.Fatalf("body of %d bytes, want %d", len(body), slots+filter+histories+4)
	}
	if sum, c := binary.LittleEndian.Uint32(body[len(body)-4:]), crc32.Checksum(body[:len(body)-4], castagnoli); sum != c {
		t.Fatalf("body checksum %08x, want %08x", sum, c)
	}
	// The slot of user 1 holds its id and its state word, LeftAtNs+1.
	found := false
	for i := 0; i < slots; i += 16 {
		if binary.LittleEndian.Uint64(body[i:]) == 1 && binary.LittleEndian.Uint64(body[i+8:]) == 101 {
			found = true
		}
	}
	if !found {
		t.Error("no slot (1, 101) in the body")
	}
	h := body[slots+filter:]
	wantHist := []uint64{10, 20, 30, OpenEnd}
	if n := binary.LittleEndian.Uint32(h); n != 2 {
		t.Fatalf("history 0 has %d episodes, want 2", n)
	}
	for i, w := range wantHist {
		if got := binary.LittleEndian.Uint64(h[4+8*i:]); got != w {
			t.Errorf("history 0 word %d: %d, want %d", i, got, w)
		}
	}
}

// randomMap fills a Map the way the processor does: many users with one
// open leave, some with histories, some set again or cleared; growth
// included.
func randomMap(rng *rand.Rand, users int) (*Map, map[uint64][]Episode) {
	m := New()
	want := make(map[uint64][]Episode)
	for range users {
		u := rng.Uint64N(uint64(users) * 2)
		var eps []Episode
		switch rng.IntN(10) {
		case 0: // cleared
		case 1, 2: // a closed episode, maybe an open one after it
			eps = []Episode{{rng.Uint64N(1000), 1000 + rng.Uint64N(1000)}}
			if rng.IntN(2) == 0 {
				eps = append(eps, Episode{3000, OpenEnd})
			}
		case 3:
			eps = []Episode{{math.MaxUint64 - 1, OpenEnd}}
		default:
			eps = []Episode{{rng.Uint64N(1 << 62), OpenEnd}}
		}
		if err := m.Set(u, eps); err != nil {
			panic(err)
		}
		want[u] = eps
	}
	return m, want
}

func sameGate(t *testing.T, got *Map, want map[uint64][]Episode, wantLen int) {
	t.Helper()
	if got.Len() != wantLen {
		t.Fatalf("Len %d, want %d", got.Len(), wantLen)
	}
	for u, eps := range want {
		if g := got.Episodes(u, nil); !slices.Equal(g, eps) {
			t.Fatalf("user %d: episodes %v, want %v", u, g, eps)
		}
		for _, e := range eps {
			if got.Allows(u, e.LeftAtNs) == (e.LeftAtNs < e.RejoinedAtNs) {
				t.Fatalf("user %d at %d: Allows disagrees with %v", u, e.LeftAtNs, eps)
			}
		}
	}
}

func TestSnapshotRoundTrip(t *testing.T) {
	for _, users := range []int{0, 1, 47, 48, 1000, 50_000} {
		rng := rand.New(rand.NewPCG(uint64(users), 1))
		m, want := randomMap(rng, users)
		b := save(t, m, "checkpoints")
		got := New(Capacity(10)) // replaced whole
		_ = got.Set(math.MaxUint64, []Episode{{1, OpenEnd}})
		var label []byte
		if err := load(got, b, func(l []byte) error { label = slices.Clone(l); return nil }); err != nil {
			t.Fatalf("%d users: %v", users, err)
		}
		if string(label) != "checkpoints" {
			t.Fatalf("label %q", label)
		}
		if _, ok := want[math.MaxUint64]; !ok && !got.Allows(math.MaxUint64, 2) {
			t.Fatal("a user set before the load survived it")
		}
		sameGate(t, got, want, m.Len())
		if got.MemoryBytes() != m.MemoryBytes() {
			t.Fatalf("MemoryBytes %d, want %d", got.MemoryBytes(), m.MemoryBytes())
		}
		// The loaded Map is a Map like any other: it takes Sets and grows,
		// and saves to the same bytes it was loaded from.
		if b2 := save(t, got, "checkpoints"); !bytes.Equal(b, b2) {
			t.Fatal("saving the loaded Map gave other bytes")
		}
		for i := range uint64(2000) {
			u := 1<<40 + i
			if err := got.Set(u, []Episode{{i, OpenEnd}}); err != nil {
				t.Fatal(err)
			}
			want[u] = []Episode{{i, OpenEnd}}
		}
		sameGate(t, got, want, m.Len()+2000)
	}
}

func TestSnapshotZeroMap(t *testing.T) {
	var m Map
	b := save(t, &m, "")
	got := New()
	if err := load(got, b, nil); err != nil {
		t.Fatal(err)
	}
	if got.Len() != 0 || !got.Allows(1, 1) {
		t.Fatal("the zero Map's snapshot is not empty")
	}
}

// TestSnapshotCorrupt: every single-byte change, every truncation and
// extra bytes are refused with ErrBadSnapshot, and the Map keeps what it
// had.
func TestSnapshotCorrupt(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	src, _ := randomMap(rng, 30)
	b := save(t, src, "L")
	m := New()
	_ = m.Set(99, []Episode{{5, OpenEnd}})
	check := func(what string, data []byte, size int64) {
		t.Helper()
		err := m.Load(bytes.NewReader(data), size, nil)
		if !errors.Is(err, ErrBadSnapshot) {
			t.Fatalf("%s: error %v, want ErrBadSnapshot", what, err)
		}
		if m.Len() != 1 || m.Allows(99, 5) {
			t.Fatalf("%s: the Map changed", what)
		}
	}
	for i := range b {
		c := slices.Clone(b)
		c[i] ^= 1 << (i % 8)
		check("byte "+itoa(i)+" flipped", c, int64(len(c)))
	}
	for n := range len(b) {
		check("truncated to "+itoa(n), b[:n], int64(n))
		check("truncated to "+itoa(n)+", size claimed", b[:n], int64(len(b)))
	}
	check("a byte more", append(slices.Clone(b), 0), int64(len(b)+1))
	check("a byte more, size claimed", append(slices.Clone(b), 0), int64(len(b)))
}

func TestSnapshotRefusedLabel(t *testing.T) {
	src, _ := randomMap(rand.New(rand.NewPCG(1, 2)), 100)
	b := save(t, src, "p0=10")
	m := New()
	stale := errors.New("stale")
	err := load(m, b, func(l []byte) error {
		if string(l) != "p0=11" {
			return stale
		}
		return nil
	})
	if !errors.Is(err, stale) || errors.Is(err, ErrBadSnapshot) {
		t.Fatalf("error %v, want the accept func's", err)
	}
	if m.Len() != 0 {
		t.Fatal("a refused snapshot was loaded")
	}
}

// TestSnapshotInvariants: contents with good checksums that break the
// table's invariants are refused.
func TestSnapshotInvariants(t *testing.T) {
	m := seededMap(64, 42)
	_ = m.Set(1, []Episode{{100, OpenEnd}})
	_ = m.Set(2, []Episode{{10, 20}, {30, OpenEnd}})
	good := save(t, m, "")
	bodyAt := headerLen + 4
	slotOf := func(b []byte, user uint64) int {
		for i := range 64 {
			at := bodyAt + 16*i
			if binary.LittleEndian.Uint64(b[at:]) == user && binary.LittleEndian.Uint64(b[at+8:]) != 0 {
				return at
			}
		}
		t.Fatalf("no slot of user %d", user)
		return 0
	}
	histAt := bodyAt + 64*16 + 64
	tests := []struct {
		name   string
		change func(b []byte)
	}{
		{"moved from its home", func(b []byte) {
			at := slotOf(b, 1)
			to := bodyAt + (at-bodyAt+16*7)%(64*16)
			copy(b[to:to+16], b[at:at+16])
			clear(b[at : at+16])
		}},
		{"key in an empty slot", func(b []byte) {
			for i := range 64 {
				at := bodyAt + 16*i
				if binary.LittleEndian.Uint64(b[at+8:]) == 0 {
					b[at] = 9
					return
				}
			}
		}},
		{"history index out of range", func(b []byte) {
			binary.LittleEndian.PutUint64(b[slotOf(b, 2)+8:], ovfFlag|5)
		}},
		{"episodes out of order", func(b []byte) {
			binary.LittleEndian.PutUint64(b[histAt+4:], 25) // [25, 20)
		}},
		{"members miscounted", func(b []byte) {
			binary.LittleEndian.PutUint64(b[slotOf(b, 1)+8:], valNone)
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := slices.Clone(good)
			tc.change(b)
			reseal(b)
			err := load(New(), b, nil)
			if !errors.Is(err, ErrBadSnapshot) {
				t.Fatalf("error %v, want ErrBadSnapshot", err)
			}
			t.Log(err)
		})
	}
}

// reseal recomputes both checksums of b in place, where its header says
// they are; it leaves b alone if the header does not decode.
func reseal(b []byte) {
	if len(b) < headerLen {
		return
	}
	h, err := decodeHeader((*[headerLen]byte)(b))
	if err != nil || int64(len(b)) != h.size() {
		return
	}
	at := headerLen + int(h.labelLen)
	binary.LittleEndian.PutUint32(b[at:], crc32.Checksum(b[:at], castagnoli))
	binary.LittleEndian.PutUint32(b[len(b)-4:], crc32.Checksum(b[at+4:len(b)-4], castagnoli))
}

// FuzzLoad feeds Load arbitrary bytes, and the same bytes with their
// checksums recomputed so that the checks behind them are reached. Load
// must never panic, and a snapshot it accepts must save to the same bytes.
func FuzzLoad(f *testing.F) {
	for _, users := range []int{0, 3, 40} {
		m, _ := randomMap(rand.New(rand.NewPCG(uint64(users), 3)), users)
		var buf bytes.Buffer
		if _, err := m.Save(&buf, []byte("seed")); err != nil {
			f.Fatal(err)
		}
		f.Add(buf.Bytes())
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, b := range [][]byte{data, resealed(data)} {
			m := New()
			var label []byte
			if err := load(m, b, func(l []byte) error { label = slices.Clone(l); return nil }); err != nil {
				continue
			}
			var out bytes.Buffer
			if _, err := m.Save(&out, label); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(out.Bytes(), b) {
				t.Fatal("an accepted snapshot saves to other bytes")
			}
		}
	})
}

func resealed(data []byte) []byte {
	b := slices.Clone(data)
	reseal(b)
	return b
}

func itoa(i int) string { return strconv.Itoa(i) }

// stallWriter holds its first Write until release is closed, having
// closed stalled; it keeps what is written.
type stallWriter struct {
	buf      bytes.Buffer
	once     sync.Once
	stalled  chan struct{}
	release  chan struct{}
	released sync.Once
}

func newStallWriter() *stallWriter {
	return &stallWriter{stalled: make(chan struct{}), release: make(chan struct{})}
}

func (w *stallWriter) Write(p []byte) (int, error) {
	w.once.Do(func() {
		close(w.stalled)
		<-w.release
	})
	return w.buf.Write(p)
}

func (w *stallWriter) unstall() { w.released.Do(func() { close(w.release) }) }

// TestSaveDoesNotHoldWriters: while Save's writer is stuck (a slow disk),
// Sets complete, including ones that replace histories, clear users and
// rebuild the table; the snapshot is the Map as it was when Save began.
func TestSaveDoesNotHoldWriters(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	m, want := randomMap(rng, 20_000)
	wantLen := m.Len()
	before := save(t, m, "L")

	w := newStallWriter()
	defer w.unstall()
	saved := make(chan error, 1)
	go func() {
		_, err := m.Save(w, []byte("L"))
		saved <- err
	}()
	select {
	case <-w.stalled:
	case err := <-saved:
		t.Fatalf("Save returned %v without writing", err)
	case <-time.After(time.Minute):
		t.Fatal("Save did not write")
	}

	setsDone := make(chan error, 1)
	go func() {
		for u, eps := range want { // replace every user's episodes
			next := []Episode{{7, 8}, {9, OpenEnd}}
			if len(eps) > 0 {
				next = nil
			}
			if err := m.Set(u, next); err != nil {
				setsDone <- err
				return
			}
		}
		for i := range uint64(50_000) { // new users, past a rebuild
			if err := m.Set(1<<50+i, []Episode{{i, OpenEnd}}); err != nil {
				setsDone <- err
				return
			}
		}
		setsDone <- nil
	}()
	select {
	case err := <-setsDone:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(time.Minute):
		t.Fatal("Set waited for Save's writer")
	}
	w.unstall()
	if err := <-saved; err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(w.buf.Bytes(), before) {
		t.Fatal("the snapshot differs from the Map when Save began")
	}
	got := New()
	if err := load(got, w.buf.Bytes(), nil); err != nil {
		t.Fatal(err)
	}
	sameGate(t, got, want, wantLen)
}

// TestSaveWhileGrowing saves while another goroutine adds users, so that
// the table is often rebuilt between Save's allocation and its copy: each
// snapshot loads, and holds a prefix of the users added, in order.
func TestSaveWhileGrowing(t *testing.T) {
	for _, tries := range []int{3, 1} { // 1: always allocates under the mutex
		t.Run("tries="+itoa(tries), func(t *testing.T) {
			defer func(old int) { snapshotTries = old }(snapshotTries)
			snapshotTries = tries
			saveWhileGrowing(t)
		})
	}
}

func saveWhileGrowing(t *testing.T) {
	m := New()
	const users, saves = 30_000, 10
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for i := range uint64(users) {
			select {
			case <-stop:
				return
			default:
			}
			eps := []Episode{{i, OpenEnd}}
			if i%2 == 0 {
				eps = []Episode{{0, i}, {i, OpenEnd}}
			}
			if err := m.Set(i, eps); err != nil {
				panic(err)
			}
		}
	}()
	defer func() { close(stop); <-done }()
	for i := range saves {
		var buf bytes.Buffer
		if _, err := m.Save(&buf, nil); err != nil {
			t.Fatal(err)
		}
		got := New()
		if err := load(got, buf.Bytes(), nil); err != nil {
			t.Fatalf("save %d: %v", i, err)
		}
		n := uint64(got.Len())
		if n > 0 && (got.Allows(n-1, n-1) || !got.Allows(n, n)) {
			t.Fatalf("save %d of %d users: not the first %d added", i, n, n)
		}
	}
}

// TestSnapshotCheckSpans: Load checks the table in spans, each run of
// occupied slots whole by the span holding the empty slot before it, also
// when the run crosses into the next spans or wraps around the end. With
// spans of a few slots, Load accepts what it accepts checking the table as
// one span, and refuses what it refuses: a bit of each byte of the slots
// flipped, and every two neighbouring slots swapped, checksums
// recomputed.
func TestSnapshotCheckSpans(t *testing.T) {
	defer func(old int) { checkSpan = old }(checkSpan)
	loadWith := func(span int, b []byte) error {
		checkSpan = span
		return load(New(), b, nil)
	}
	for _, users := range []int{1, 47, 48, 1000} {
		m, want := randomMap(rand.New(rand.NewPCG(uint64(users), 9)), users)
		b := save(t, m, "")
		for _, span := range []int{1, 2, 3, 8, 64} {
			checkSpan = span
			got := New()
			if err := load(got, b, nil); err != nil {
				t.Fatalf("%d users, spans of %d: %v", users, span, err)
			}
			sameGate(t, got, want, m.Len())
		}
	}

	// 40 users in 64 slots: long runs, some across span boundaries.
	m := seededMap(64, 11)
	for u := range uint64(40) {
		eps := []Episode{{u, OpenEnd}}
		if u%5 == 0 {
			eps = []Episode{{0, u}, {u + 1, OpenEnd}}
		}
		if err := m.Set(u, eps); err != nil {
			t.Fatal(err)
		}
	}
	good := save(t, m, "")
	bodyAt := headerLen + 4
	var variants [][]byte
	for i := range 64 * 16 {
		c := slices.Clone(good)
		c[bodyAt+i] ^= 1 << (i % 8)
		variants = append(variants, c)
	}
	for i := range 64 {
		c := slices.Clone(good)
		at, next := bodyAt+16*i, bodyAt+16*((i+1)%64)
		var tmp [16]byte
		copy(tmp[:], c[at:at+16])
		copy(c[at:at+16], c[next:next+16])
		copy(c[next:next+16], tmp[:])
		variants = append(variants, c)
	}
	refused := 0
	for i, c := range variants {
		reseal(c)
		whole := loadWith(1<<16, c)
		for _, span := range []int{1, 3, 8} {
			err := loadWith(span, c)
			if (err == nil) != (whole == nil) || (err != nil && !errors.Is(err, ErrBadSnapshot)) {
				t.Fatalf("variant %d, spans of %d: %v; as one span: %v", i, span, err, whole)
			}
		}
		if whole != nil {
			refused++
		}
	}
	t.Logf("%d of %d variants refused", refused, len(variants))
}

// TestSnapshotIsItsMoment: a Snapshot saves the Map as it was when taken,
// whatever was set since, and cannot be saved once released.
func TestSnapshotIsItsMoment(t *testing.T) {
	m, _ := randomMap(rand.New(rand.NewPCG(8, 8)), 3000)
	before := save(t, m, "L")
	s := m.Snapshot()
	if s.Len() != m.Len() {
		t.Fatalf("Len %d, the Map's %d", s.Len(), m.Len())
	}
	for i := range uint64(10_000) {
		if err := m.Set(i, []Episode{{1, 2}, {i + 3, OpenEnd}}); err != nil {
			t.Fatal(err)
		}
	}
	var buf bytes.Buffer
	if _, err := s.Save(&buf, []byte("L")); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), before) {
		t.Fatal("the snapshot saved other bytes than the Map when taken")
	}
	s.Release()
	s.Release()
	if _, err := s.Save(io.Discard, nil); err == nil {
		t.Fatal("a released snapshot saved")
	}
}

// TestPrepareSnapshot: a Snapshot after PrepareSnapshot copies into the
// memory prepared, if the table kept its size, and saves the same bytes
// either way; a prepared memory of another size is dropped.
func TestPrepareSnapshot(t *testing.T) {
	m, _ := randomMap(rand.New(rand.NewPCG(6, 6)), 5000)
	before := save(t, m, "L")
	saveSnapshot := func() []byte {
		t.Helper()
		s := m.Snapshot()
		defer s.Release()
		var buf bytes.Buffer
		if _, err := s.Save(&buf, []byte("L")); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}

	m.PrepareSnapshot()
	prepared := m.spare.words
	m.PrepareSnapshot() // the same size: kept
	if len(prepared) == 0 || &m.spare.words[0] != &prepared[0] {
		t.Fatal("a second PrepareSnapshot replaced the memory prepared")
	}
	s := m.Snapshot()
	if &s.words[0] != &prepared[0] || m.spare.words != nil {
		t.Fatal("Snapshot did not take the memory prepared")
	}
	var buf bytes.Buffer
	if _, err := s.Save(&buf, []byte("L")); err != nil {
		t.Fatal(err)
	}
	s.Release()
	if !bytes.Equal(buf.Bytes(), before) {
		t.Fatal("a snapshot into prepared memory saved other bytes")
	}

	// Prepared, then the table grows: the memory is dropped.
	done := make(chan error, 1)
	go func() { // Sets meanwhile, under -race
		for i := range uint64(20_000) {
			if err := m.Set(1<<45+i, []Episode{{i, OpenEnd}}); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	m.PrepareSnapshot()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	after := saveSnapshot()
	got := New()
	if err := load(got, after, nil); err != nil {
		t.Fatal(err)
	}
	if got.Len() != m.Len() {
		t.Fatalf("loaded %d members, the Map has %d", got.Len(), m.Len())
	}
	if m.spare.words != nil {
		t.Fatal("memory left prepared after the Snapshot")
	}
}
