package gate

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
	"unsafe"
)

// A snapshot is a Map written out as its table is laid out in memory, so
// that loading it is one sequential read into a table of the same size,
// without a hash or an insert per user. All integers are little-endian.
//
//	header   0  8  magic "cgGATEsn"
//	         8  4  version (snapshotVersion)
//	        12  4  label length L (≤ maxLabel)
//	        16  8  members: users with at least one episode (Len)
//	        24  8  slots: table size, a power of 2 in [minSlots, maxSnapshotSlots]
//	        32  8  used: occupied slots (users, and users set to no episodes)
//	        40  8  seed of the table's hash
//	        48  8  histories: overflow indices handed out
//	        56  8  episodes: total episodes in the histories
//	label   64  L  the caller's bytes (what the Map reflects)
//	        +4     crc32c (Castagnoli) of the header and the label
//	body    slots × 16   each slot: user id, state word (see table.go)
//	        slots        the filter: slots/8 words of 8 bytes
//	        histories    each: episode count (4 bytes), then count ×
//	                     (LeftAtNs, RejoinedAtNs), 16 bytes each
//	        +4           crc32c of the body
//
// The header has a checksum of its own, so that a caller can refuse a
// snapshot by its label before the body is read; the body's checksum
// covers the rest. The size of the whole is fixed by the header, and Load
// refuses a file of any other size.
const (
	snapshotMagic   = "cgGATEsn"
	snapshotVersion = 1
	headerLen       = 64
	// maxLabel bounds the caller's label.
	maxLabel = 1 << 20
	// maxSnapshotSlots bounds the table a snapshot may declare (16 TiB of
	// slots), so that the size arithmetic cannot overflow; the size check
	// keeps a bad header from allocating more than the file holds.
	maxSnapshotSlots = 1 << 40
	// ioChunk is how much Save and Load move per read or write: large
	// enough to cost nothing per call, small enough that the checksum
	// reads it back from the cache.
	ioChunk = 1 << 20
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// ErrBadSnapshot is wrapped by the error [Map.Load] returns for a snapshot
// it cannot read: wrong magic, version or size, a checksum that does not
// match, or contents that break the table's invariants. The error says
// which.
var ErrBadSnapshot = errors.New("gate: bad snapshot")

// snapshotHeader is the fixed part of the header.
type snapshotHeader struct {
	version   uint32
	labelLen  uint32
	members   uint64
	slots     uint64
	used      uint64
	seed      uint64
	histories uint64
	episodes  uint64
}

func (h *snapshotHeader) encode(b *[headerLen]byte) {
	copy(b[0:8], snapshotMagic)
	binary.LittleEndian.PutUint32(b[8:], h.version)
	binary.LittleEndian.PutUint32(b[12:], h.labelLen)
	binary.LittleEndian.PutUint64(b[16:], h.members)
	binary.LittleEndian.PutUint64(b[24:], h.slots)
	binary.LittleEndian.PutUint64(b[32:], h.used)
	binary.LittleEndian.PutUint64(b[40:], h.seed)
	binary.LittleEndian.PutUint64(b[48:], h.histories)
	binary.LittleEndian.PutUint64(b[56:], h.episodes)
}

func decodeHeader(b *[headerLen]byte) (snapshotHeader, error) {
	if string(b[0:8]) != snapshotMagic {
		return snapshotHeader{}, fmt.Errorf("%w: magic %q, want %q", ErrBadSnapshot, b[0:8], snapshotMagic)
	}
	h := snapshotHeader{
		version:   binary.LittleEndian.Uint32(b[8:]),
		labelLen:  binary.LittleEndian.Uint32(b[12:]),
		members:   binary.LittleEndian.Uint64(b[16:]),
		slots:     binary.LittleEndian.Uint64(b[24:]),
		used:      binary.LittleEndian.Uint64(b[32:]),
		seed:      binary.LittleEndian.Uint64(b[40:]),
		histories: binary.LittleEndian.Uint64(b[48:]),
		episodes:  binary.LittleEndian.Uint64(b[56:]),
	}
	var reason string
	switch {
	case h.version != snapshotVersion:
		return h, fmt.Errorf("%w: version %d, this build reads only %d", ErrBadSnapshot, h.version, snapshotVersion)
	case h.labelLen > maxLabel:
		reason = fmt.Sprintf("label of %d bytes, more than %d", h.labelLen, maxLabel)
	case h.slots < minSlots || h.slots > maxSnapshotSlots || h.slots&(h.slots-1) != 0:
		reason = fmt.Sprintf("%d slots, not a power of 2 in [%d, %d]", h.slots, minSlots, uint64(maxSnapshotSlots))
	case h.used > uint64(maxUsed(int(h.slots))):
		reason = fmt.Sprintf("%d of %d slots used, more than three quarters", h.used, h.slots)
	case h.members > h.used || h.histories > h.used:
		reason = fmt.Sprintf("%d members and %d histories in %d used slots", h.members, h.histories, h.used)
	case h.episodes > maxSnapshotSlots:
		reason = fmt.Sprintf("%d episodes", h.episodes)
	default:
		return h, nil
	}
	return h, fmt.Errorf("%w: %s", ErrBadSnapshot, reason)
}

// size is the length of the whole snapshot the header describes. The
// header's bounds keep it from overflowing.
func (h *snapshotHeader) size() int64 {
	return headerLen + int64(h.labelLen) + 4 +
		int64(h.slots)*16 + int64(h.slots) +
		int64(h.histories)*4 + int64(h.episodes)*16 + 4
}

// Save writes a snapshot of the Map to w with label, the caller's account
// of what the Map reflects (at most 1 MiB), and returns the bytes written:
// [Map.Snapshot], then [Snapshot.Save] and [Snapshot.Release]. The
// snapshot is the Map at one moment while Save runs; Set waits only for
// the copy Snapshot takes, not for w, and readers never wait. The
// snapshot is as large as the table ([Map.MemoryBytes]).
func (m *Map) Save(w io.Writer, label []byte) (int64, error) {
	if len(label) > maxLabel {
		return 0, fmt.Errorf("gate: snapshot label of %d bytes, more than %d", len(label), maxLabel)
	}
	s := m.Snapshot()
	defer s.Release()
	return s.Save(w, label)
}

// Snapshot is a copy of a Map's state at one moment, to be written with
// Save; its memory is freed by Release.
type Snapshot struct {
	h       snapshotHeader // without the label length and episode count
	words   []uint64       // the slots' words, then the filter's
	hists   []*history     // the histories, by overflow index
	release func()         // frees words
}

// Snapshot copies the Map's state: the table's slots and filter, and the
// pointers to the histories (which are never modified once stored), while
// holding the writers' mutex. Set waits for the copy (0.3-0.6 s per GiB of
// table on a shared 2-core machine at load 10), readers do not. The copy
// is the cost: until Release, memory as large as the table without its
// histories (17 bytes a slot: 2.1 GiB at 2^27 slots, the table of 100M
// members) plus 8 bytes per history. On Linux it is mapped outside the Go
// heap, faulted in before the mutex is taken (or beforehand, by
// PrepareSnapshot), and returned to the system by Release.
func (m *Map) Snapshot() *Snapshot {
	tries := snapshotTries
	for try := 1; ; try++ {
		nslots, nlists := minSlots, 0
		if t := m.table.Load(); t != nil {
			nslots, nlists = len(t.slots), len(t.ovf.Load().lists)
		}
		f := &Snapshot{}
		if try < tries {
			f.words, f.release = m.takeSpare(nslots)
			if f.words == nil {
				f.words, f.release = allocWords(2*nslots + nslots/slotsPerFilterWord)
			}
			f.hists = make([]*history, nlists)
		}
		m.mu.Lock()
		t := m.table.Load()
		if t == nil { // zero Map
			t = newTable(minSlots)
		}
		ovf := t.ovf.Load()
		if try < tries && (len(t.slots) != nslots || m.mu.ovfLen > nlists) {
			m.mu.Unlock()
			f.release()
			continue
		}
		if try >= tries {
			nslots = len(t.slots)
			f.words, f.release = allocWords(2*nslots + nslots/slotsPerFilterWord)
			f.hists = make([]*history, m.mu.ovfLen)
		}
		copy(f.words, slotWords(t.slots))
		copy(f.words[2*nslots:], filterWords(t.filter))
		f.hists = f.hists[:m.mu.ovfLen]
		for i := range f.hists {
			f.hists[i] = ovf.lists[i].Load()
		}
		f.h = snapshotHeader{
			version:   snapshotVersion,
			members:   uint64(m.live.Load()),
			slots:     uint64(nslots),
			used:      uint64(m.mu.used),
			seed:      t.seed,
			histories: uint64(m.mu.ovfLen),
		}
		m.mu.Unlock()
		return f
	}
}

// PrepareSnapshot allocates and faults in the memory the next
// [Map.Snapshot] copies the table into, so that Snapshot, unless the table
// is rebuilt meanwhile, only copies: faulting in gigabytes can take longer
// than copying them (0.6-1.2 s a GiB on a shared machine short of free
// memory). The memory is held until that Snapshot is released; a
// PrepareSnapshot that finds memory already prepared for the table's size
// does nothing. It takes no lock that Set takes, and is safe to call from
// any goroutine.
func (m *Map) PrepareSnapshot() {
	nslots := minSlots
	if t := m.table.Load(); t != nil {
		nslots = len(t.slots)
	}
	m.spare.Lock()
	defer m.spare.Unlock()
	if m.spare.words != nil {
		if m.spare.slots == nslots {
			return
		}
		m.spare.release()
	}
	m.spare.words, m.spare.release = allocWords(2*nslots + nslots/slotsPerFilterWord)
	m.spare.slots = nslots
}

// takeSpare returns the memory PrepareSnapshot prepared if it is for a
// table of nslots slots, or nil; either way, none is left prepared.
func (m *Map) takeSpare(nslots int) ([]uint64, func()) {
	m.spare.Lock()
	defer m.spare.Unlock()
	words, release, slots := m.spare.words, m.spare.release, m.spare.slots
	m.spare.words, m.spare.release = nil, nil
	switch {
	case words == nil:
		return nil, nil
	case slots != nslots:
		release()
		return nil, nil
	}
	return words, release
}

// Len returns the number of users with at least one episode in the
// snapshot.
func (s *Snapshot) Len() int { return int(s.h.members) }

// Release frees the snapshot's memory; Save must not be called after it.
// Release may be called more than once.
func (s *Snapshot) Release() {
	if s.release != nil {
		s.release()
	}
	s.release, s.words, s.hists = nil, nil, nil
}

// Save writes the snapshot to w with label, the caller's account of what
// the Map reflected when the snapshot was taken (at most 1 MiB), and
// returns the bytes written, in the format [Map.Load] reads. It changes
// nothing and may run on any goroutine, while the Map takes Sets.
func (s *Snapshot) Save(w io.Writer, label []byte) (int64, error) {
	if len(label) > maxLabel {
		return 0, fmt.Errorf("gate: snapshot label of %d bytes, more than %d", len(label), maxLabel)
	}
	if s.words == nil {
		return 0, errors.New("gate: snapshot saved after its release")
	}
	h := s.h
	h.labelLen = uint32(len(label))
	for _, hist := range s.hists {
		h.episodes += uint64(len(hist.eps))
	}
	sw := &sumWriter{w: w}
	var hb [headerLen]byte
	h.encode(&hb)
	sw.write(hb[:])
	sw.write(label)
	sw.writeSum()

	sw.writeWords(s.words) // the slots, then the filter
	var eb [16]byte
	for _, hist := range s.hists {
		binary.LittleEndian.PutUint32(eb[:4], uint32(len(hist.eps)))
		sw.write(eb[:4])
		for _, e := range hist.eps {
			binary.LittleEndian.PutUint64(eb[0:], e.LeftAtNs)
			binary.LittleEndian.PutUint64(eb[8:], e.RejoinedAtNs)
			sw.write(eb[:])
		}
	}
	sw.writeSum()
	if sw.err != nil {
		return sw.n, fmt.Errorf("gate: unable to write snapshot: %w", sw.err)
	}
	return sw.n, nil
}

// snapshotTries is how often Snapshot allocates before taking the mutex,
// for the table as it is then: if a rebuild replaces the table in
// between, it tries again, and at the last try allocates under the mutex.
// A variable for the tests.
var snapshotTries = 3

// Load replaces the Map's contents with the snapshot read from r, which
// must be size bytes long. Once the header is read and checked, accept
// (if not nil) is called with its label; an error from accept stops Load
// before the body is read, and is returned wrapped. Any other failure
// wraps [ErrBadSnapshot] (or is r's error) and says why. On error the Map
// is as it was.
//
// Load checks the body's checksum and the table's invariants: every
// occupied slot is reachable from its user's hash, the counts agree with
// the header, every overflow index points to a history and every history
// is ascending and disjoint. The filter is covered by the checksum alone.
// The table is checked on GOMAXPROCS goroutines, span by span as its slots
// arrive, while the rest of the snapshot is read (see tableCheck); a
// failed checksum is reported before a broken invariant, as the likelier
// cause.
//
// Like Set, Load is serialized with the other writers; readers see the
// table before the load or after it, never a mix.
func (m *Map) Load(r io.Reader, size int64, accept func(label []byte) error) error {
	var hb [headerLen]byte
	if _, err := io.ReadFull(r, hb[:]); err != nil {
		return readErr("header", err)
	}
	h, err := decodeHeader(&hb)
	if err != nil {
		return err
	}
	if want := h.size(); size != want {
		return fmt.Errorf("%w: %d bytes, the header describes %d", ErrBadSnapshot, size, want)
	}
	label := make([]byte, h.labelLen)
	if _, err := io.ReadFull(r, label); err != nil {
		return readErr("label", err)
	}
	sum := crc32.Update(crc32.Update(0, castagnoli, hb[:]), castagnoli, label)
	if err := checkSum(r, sum, "header"); err != nil {
		return err
	}
	if accept != nil {
		if err := accept(label); err != nil {
			return fmt.Errorf("gate: snapshot refused: %w", err)
		}
	}

	t := newTableSeeded(int(h.slots), h.seed)
	c := newTableCheck(t, &h)
	workers := runtime.GOMAXPROCS(0) - 1
	for range workers {
		c.wg.Go(c.work)
	}
	o, histBytes, nonEmpty, err := readBody(r, t, &h, c)
	if err != nil {
		c.abort()
		return err
	}
	t.ovf.Store(o)
	c.work() // what the others have not taken yet
	live, err := c.result(nonEmpty)
	if err != nil {
		return err
	}

	m.mu.Lock()
	defer m.mu.Unlock()
	m.mu.used, m.mu.ovfLen, m.mu.histBytes = int(h.used), int(h.histories), histBytes
	m.live.Store(int64(live))
	m.installLocked(t)
	return nil
}

// readBody reads the body of a snapshot whose header is h into t, telling
// c as the slots arrive, and returns the histories, their size, and which
// of them have episodes (a bit per history).
func readBody(r io.Reader, t *table, h *snapshotHeader, c *tableCheck) (o *overflow, histBytes int64, nonEmpty []uint64, err error) {
	sr := &sumReader{r: r}
	slots := slotWords(t.slots)
	const per = 2 * ioChunk / 16 // words of a chunk of slots
	for at := 0; at < len(slots); at += per {
		if err := sr.readWords(slots[at:min(at+per, len(slots))]); err != nil {
			return nil, 0, nil, readErr("slots", err)
		}
		c.arrived(min(at+per, len(slots)) / 2)
	}
	if err := sr.readWords(filterWords(t.filter)); err != nil {
		return nil, 0, nil, readErr("filter", err)
	}
	// Room for the histories as addHistoryLocked would have grown it, so
	// that MemoryBytes is what it was before the save.
	o = &overflow{}
	if h.histories > 0 {
		o.lists = make([]atomic.Pointer[history], pow2AtLeast(max(16, int(h.histories))))
	}
	nonEmpty = make([]uint64, (h.histories+63)/64)
	// The histories are read through a buffer of their own: r may be a
	// file, and they are read a few bytes at a time. Their size is known,
	// so the buffer reads no further.
	hr := &sumReader{r: bufio.NewReaderSize(io.LimitReader(r, int64(h.histories)*4+int64(h.episodes)*16), ioChunk), sum: sr.sum}
	var eb [16]byte
	var eps []Episode
	for i := range int(h.histories) {
		if err := hr.read(eb[:4]); err != nil {
			return nil, 0, nil, readErr("histories", err)
		}
		n := uint64(binary.LittleEndian.Uint32(eb[:4]))
		if n > h.episodes {
			return nil, 0, nil, fmt.Errorf("%w: history %d has %d episodes, more than the %d of all", ErrBadSnapshot, i, n, h.episodes)
		}
		eps = eps[:0]
		for range n {
			if err := hr.read(eb[:]); err != nil {
				return nil, 0, nil, readErr("histories", err)
			}
			eps = append(eps, Episode{binary.LittleEndian.Uint64(eb[0:]), binary.LittleEndian.Uint64(eb[8:])})
		}
		if j, reason := badEpisode(eps); reason != "" {
			return nil, 0, nil, fmt.Errorf("%w: history %d: episode %d [%d, %d) %s", ErrBadSnapshot, i, j, eps[j].LeftAtNs, eps[j].RejoinedAtNs, reason)
		}
		hist := newHistory(eps)
		histBytes += hist.bytes()
		o.lists[i].Store(hist)
		if n > 0 {
			nonEmpty[i/64] |= 1 << (i % 64)
		}
	}
	if err := checkSum(r, hr.sum, "body"); err != nil {
		return nil, 0, nil, err
	}
	var one [1]byte
	if n, _ := r.Read(one[:]); n > 0 {
		return nil, 0, nil, fmt.Errorf("%w: bytes after the end", ErrBadSnapshot)
	}
	return o, histBytes, nonEmpty, nil
}

// checkSpan is how many slots a tableCheck takes at a time: 1 MiB of
// them. A variable for the tests.
var checkSpan = 1 << 16

// tableCheck checks the invariants of a table being loaded against its
// header, span by span of checkSpan slots, on as many goroutines as call
// work, while the slots are still arriving: empty slots hold key 0; every
// occupied slot lies in the run of occupied slots that starts at or before
// its home slot (linear probing finds it); state words point to histories
// that exist; the counts agree with the header.
//
// A span is checked from its first empty slot on, to the first empty slot
// at or after its end, which may lie spans further on (or, for the last
// span, wrap around to the first): so each run of occupied slots is
// checked whole, by the span holding the empty slot before it, and once.
// A span without an empty slot is checked by the span before it.
type tableCheck struct {
	t     *table
	h     *snapshotHeader
	next  atomic.Int64 // the next span to take
	ready atomic.Int64 // slots read so far
	stop  atomic.Bool  // reading failed: work returns
	mu    sync.Mutex   // with cond: waiting for slots to arrive
	cond  sync.Cond
	wg    sync.WaitGroup
	spans []spanCheck
}

// spanCheck is what the check of one span found.
type spanCheck struct {
	empty      bool // the span has an empty slot
	used, live uint64
	ovf        []uint64 // overflow indices, whose histories count in live if not empty
	err        error
}

func newTableCheck(t *table, h *snapshotHeader) *tableCheck {
	c := &tableCheck{t: t, h: h, spans: make([]spanCheck, (len(t.slots)+checkSpan-1)/checkSpan)}
	c.cond.L = &c.mu
	return c
}

// arrived says that the first n slots have been read.
func (c *tableCheck) arrived(n int) {
	c.ready.Store(int64(n))
	c.mu.Lock()
	c.cond.Broadcast()
	c.mu.Unlock()
}

// await waits until the first n slots have been read; false if reading
// failed.
func (c *tableCheck) await(n int) bool {
	if c.ready.Load() >= int64(n) {
		return true
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for c.ready.Load() < int64(n) && !c.stop.Load() {
		c.cond.Wait()
	}
	return !c.stop.Load()
}

// abort stops the check and waits for its goroutines.
func (c *tableCheck) abort() {
	c.mu.Lock()
	c.stop.Store(true)
	c.cond.Broadcast()
	c.mu.Unlock()
	c.wg.Wait()
}

// work checks spans until none is left or one fails.
func (c *tableCheck) work() {
	for {
		s := int(c.next.Add(1) - 1)
		if s >= len(c.spans) || c.stop.Load() || !c.checkSpan(s) {
			return
		}
	}
}

// checkSpan checks span s; false if it failed or the check stopped.
func (c *tableCheck) checkSpan(s int) bool {
	n := len(c.t.slots)
	r := &c.spans[s]
	a, b := s*checkSpan, min((s+1)*checkSpan, n)
	if !c.await(b) {
		return false
	}
	e := a
	for e < b && c.t.slots[e].val.Load() != valEmpty {
		e++
	}
	if e == b {
		return true
	}
	r.empty = true
	// Positions are unwrapped: slot p&(n-1) for p in [e, e+n).
	runStart, done := c.scan(r, e, b, 0, e, false)
	for p := b; !done && r.err == nil && p < e+n; {
		end := min(p+checkSpan, n, e+n) // within one wrap
		if end <= n && !c.await(end) {
			return false
		}
		if p >= n {
			end = min(p+checkSpan, e+n)
			runStart, done = c.scan(r, p-n, end-n, n, runStart, true)
		} else {
			runStart, done = c.scan(r, p, end, 0, runStart, true)
		}
		p = end
	}
	if r.err != nil {
		c.stop.Store(true)
		return false
	}
	return true
}

// scan checks slots [from, to), at positions off+from on, in the run of
// occupied slots that starts at position runStart; an empty slot starts
// the next run, or (stopAtEmpty) ends the scan. It returns where the
// current run starts, and whether it stopped at an empty slot; on a
// failure it sets r.err and returns done.
func (c *tableCheck) scan(r *spanCheck, from, to, off, runStart int, stopAtEmpty bool) (int, bool) {
	t := c.t
	mask := len(t.slots) - 1
	used, live, ovf := r.used, r.live, r.ovf
	defer func() { r.used, r.live, r.ovf = used, live, ovf }()
	slots := t.slots[from:to]
	for j := range slots {
		s := &slots[j]
		v := s.val.Load()
		p := off + from + j
		if v == valEmpty {
			if stopAtEmpty {
				return runStart, true // the span of this slot checks it
			}
			if k := s.key.Load(); k != 0 {
				r.err = fmt.Errorf("%w: empty slot %d holds key %d", ErrBadSnapshot, from+j, k)
				return runStart, true
			}
			runStart = p + 1
			continue
		}
		used++
		key := s.key.Load()
		home := int(t.hash(key) >> t.shift)
		if dh := (home - runStart) & mask; dh > p-runStart {
			r.err = fmt.Errorf("%w: user %d in slot %d is not reachable from its home slot %d", ErrBadSnapshot, key, from+j, home)
			return runStart, true
		}
		switch {
		case v == valNone:
		case v < ovfFlag:
			live++
		default:
			idx := v &^ ovfFlag
			if idx >= c.h.histories {
				r.err = fmt.Errorf("%w: user %d points to history %d of %d", ErrBadSnapshot, key, idx, c.h.histories)
				return runStart, true
			}
			ovf = append(ovf, idx)
		}
	}
	return runStart, false
}

// result waits for the check to end and returns the users with at least
// one episode, or the first failure by span; nonEmpty has a bit set for
// each history with episodes.
func (c *tableCheck) result(nonEmpty []uint64) (live uint64, err error) {
	c.wg.Wait()
	var used uint64
	empty := false
	for i := range c.spans {
		r := &c.spans[i]
		if r.err != nil {
			return 0, r.err
		}
		empty = empty || r.empty
		used += r.used
		live += r.live
		for _, idx := range r.ovf {
			live += nonEmpty[idx/64] >> (idx % 64) & 1
		}
	}
	if !empty {
		return 0, fmt.Errorf("%w: no empty slot", ErrBadSnapshot)
	}
	if used != c.h.used || live != c.h.members {
		return 0, fmt.Errorf("%w: %d used slots and %d members, the header says %d and %d",
			ErrBadSnapshot, used, live, c.h.used, c.h.members)
	}
	return live, nil
}

func readErr(part string, err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: truncated in the %s", ErrBadSnapshot, part)
	}
	return fmt.Errorf("gate: unable to read snapshot %s: %w", part, err)
}

func checkSum(r io.Reader, sum uint32, part string) error {
	var b [4]byte
	if _, err := io.ReadFull(r, b[:]); err != nil {
		return readErr(part+" checksum", err)
	}
	if got := binary.LittleEndian.Uint32(b[:]); got != sum {
		return fmt.Errorf("%w: %s checksum %08x, computed %08x", ErrBadSnapshot, part, got, sum)
	}
	return nil
}

// slotWords views the slots as the words they are made of (key, state
// word, key, ...), and filterWords the filter. Save reads them under the
// Map's mutex, which every writer holds; Load writes them before the
// table is published.
func slotWords(s []slot) []uint64 {
	if len(s) == 0 {
		return nil
	}
	return unsafe.Slice((*uint64)(unsafe.Pointer(&s[0])), 2*len(s))
}

func filterWords(f []atomic.Uint64) []uint64 {
	if len(f) == 0 {
		return nil
	}
	return unsafe.Slice((*uint64)(unsafe.Pointer(&f[0])), len(f))
}

// littleEndian is true on hosts whose memory holds words as the snapshot
// does, where Save and Load move the table's memory as it is.
var littleEndian = func() bool {
	x := uint16(1)
	return *(*byte)(unsafe.Pointer(&x)) == 1
}()

// sumWriter writes and checksums, keeping the first error.
type sumWriter struct {
	w   io.Writer
	sum uint32
	n   int64
	err error
	buf []byte
}

func (s *sumWriter) write(p []byte) {
	if s.err != nil {
		return
	}
	s.sum = crc32.Update(s.sum, castagnoli, p)
	var n int
	n, s.err = s.w.Write(p)
	s.n += int64(n)
}

// writeSum writes the checksum so far and starts the next.
func (s *sumWriter) writeSum() {
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], s.sum)
	s.write(b[:])
	s.sum = 0
}

// writeWords writes words little-endian, ioChunk bytes at a time.
func (s *sumWriter) writeWords(words []uint64) {
	const per = ioChunk / 8
	for len(words) > 0 && s.err == nil {
		c := words[:min(per, len(words))]
		words = words[len(c):]
		if littleEndian {
			s.write(unsafe.Slice((*byte)(unsafe.Pointer(&c[0])), 8*len(c)))
			continue
		}
		s.buf = s.buf[:0]
		for _, w := range c {
			s.buf = binary.LittleEndian.AppendUint64(s.buf, w)
		}
		s.write(s.buf)
	}
}

// sumReader reads and checksums.
type sumReader struct {
	r   io.Reader
	sum uint32
}

func (s *sumReader) read(p []byte) error {
	if _, err := io.ReadFull(s.r, p); err != nil {
		return err
	}
	s.sum = crc32.Update(s.sum, castagnoli, p)
	return nil
}

// readWords fills words from little-endian bytes, ioChunk bytes at a
// time, straight into their memory.
func (s *sumReader) readWords(words []uint64) error {
	const per = ioChunk / 8
	for len(words) > 0 {
		c := words[:min(per, len(words))]
		words = words[len(c):]
		if err := s.read(unsafe.Slice((*byte)(unsafe.Pointer(&c[0])), 8*len(c))); err != nil {
			return err
		}
		if !littleEndian {
			for i, w := range c {
				c[i] = bits.ReverseBytes64(w)
			}
		}
	}
	return nil
}
