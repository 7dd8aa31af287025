package fanout

import (
	"bufio"
	"cmp"
	"container/heap"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"sync/atomic"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// Restore headers beyond a restore's memory: the runs held, merged into
// one sorted by user with each user's latest record alone, written to a
// temporary file of the store's, and their memory used again; at the end,
// every user's latest header is the last of its entries in a merge of
// those files and the runs still held. A restore's memory is then its
// limit (Config.RestoreMemory's share), whatever the changelog holds.

const (
	// spillBuffer is the buffer of a spill file's writer, and of each
	// reader of one in a merge.
	spillBuffer = 64 << 10
	// spillFanIn is how many spill files a merge reads at most: with more,
	// groups of them are merged into one first, so that the merges of the
	// restore's workers hold restoreWorkers × spillFanIn × spillBuffer
	// (2 MiB) of buffers.
	spillFanIn = 16
	// spillIndexEvery is how many entries of a spill file an entry of its
	// index covers: a worker's range of users starts from it.
	spillIndexEvery = 1024
	// spillEntryHead is the head of an entry in a spill file: user (u64),
	// commands count (u32), offset (u64), place in the order read (u32),
	// header length (i32, -1: none), little-endian; the header follows.
	spillEntryHead = 8 + 4 + 8 + 4 + 4
)

// spillTo is where and beyond what a restore's headers spill: limit
// bytes held (0: no limit, nothing spills), or more if more gives them
// (it reports whether it took the bytes asked; nil: never); files in a
// directory of their own under dir, in fs.
type spillTo struct {
	limit     int64
	more      func(n int64) bool
	fs        vfs.FS
	dir       string
	partition int32
}

// spillSeq numbers the spill directories of restores: two restores of one
// partition, one cut short and the next, never share one.
var spillSeq atomic.Uint64

// spillFiles are a restore's spill files: sorted runs, each user once.
type spillFiles struct {
	fs    vfs.FS
	dir   string
	made  bool // dir was created
	n     int  // files created, for their names
	runs  []*spillRun
	bytes int64 // written, every file (merged ones too)
}

// spillRun is one spill file.
type spillRun struct {
	path    string
	size    int64
	entries int64
	// index holds every spillIndexEvery-th entry's user and place.
	index []spillIndex
}

type spillIndex struct {
	user uint64
	at   int64
}

func newSpillFiles(to spillTo) *spillFiles {
	return &spillFiles{fs: to.fs,
		dir: to.fs.PathJoin(to.dir, fmt.Sprintf("restore-%d-%d", to.partition, spillSeq.Add(1)))}
}

// write writes a spill file of the entries each puts, in user order.
func (s *spillFiles) write(each func(put func(*latestHeader) error) error) (*spillRun, error) {
	if !s.made {
		if err := s.fs.MkdirAll(s.dir, 0o755); err != nil {
			return nil, fmt.Errorf("creating the directory of a restore's spill files: %w", err)
		}
		s.made = true
	}
	s.n++
	r := &spillRun{path: s.fs.PathJoin(s.dir, fmt.Sprintf("run-%d", s.n))}
	f, err := s.fs.Create(r.path, vfs.WriteCategoryUnspecified)
	if err != nil {
		return nil, fmt.Errorf("creating a restore's spill file: %w", err)
	}
	w := bufio.NewWriterSize(f, spillBuffer)
	var head [spillEntryHead]byte
	err = each(func(e *latestHeader) error {
		if r.entries%spillIndexEvery == 0 {
			r.index = append(r.index, spillIndex{e.user, r.size})
		}
		n := int32(-1)
		if e.has {
			n = int32(len(e.h))
		}
		binary.LittleEndian.PutUint64(head[0:], e.user)
		binary.LittleEndian.PutUint32(head[8:], uint32(e.follows.parts))
		binary.LittleEndian.PutUint64(head[12:], uint64(e.follows.offset))
		binary.LittleEndian.PutUint32(head[20:], e.seq)
		binary.LittleEndian.PutUint32(head[24:], uint32(n))
		if _, err := w.Write(head[:]); err != nil {
			return err
		}
		if _, err := w.Write(e.h); err != nil {
			return err
		}
		r.size += spillEntryHead + int64(len(e.h))
		r.entries++
		return nil
	})
	if err == nil {
		err = w.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		_ = s.fs.Remove(r.path)
		return nil, fmt.Errorf("writing a restore's spill file: %w", err)
	}
	s.runs = append(s.runs, r)
	s.bytes += r.size
	return r, nil
}

// remove removes the spill files, and their directory.
func (s *spillFiles) remove() {
	if s.made {
		_ = s.fs.RemoveAll(s.dir)
		s.made, s.runs = false, nil
	}
}

// latestHeader is an entry of a merge: a record's header (has false: the
// record has none) and what orders it among its user's.
type latestHeader struct {
	user    uint64
	follows restoreOrder
	seq     uint32
	has     bool
	h       []byte
}

func compareLatest(a, b *latestHeader) int {
	if c := cmp.Compare(a.user, b.user); c != 0 {
		return c
	}
	if c := a.follows.compare(b.follows); c != 0 {
		return c
	}
	return cmp.Compare(a.seq, b.seq)
}

// headerCursor goes through sorted entries: a run held or a spill file.
// An entry stays valid until the cursor moves twice more: a merge uses
// the one it took from a cursor after moving it.
type headerCursor interface {
	// next moves to the next entry; false at the end, or on an error.
	next() bool
	head() *latestHeader
	err() error
	close()
}

// fileCursor goes through a spill file, its entries read into two buffers
// in turn.
type fileCursor struct {
	f    vfs.File
	r    *bufio.Reader
	buf  [spillEntryHead]byte // an entry's head, read (on the stack, it escaped)
	bufs [2][]byte
	turn int
	cur  latestHeader
	e    error
}

// openRun opens a cursor on r's entries from the first of a user at or
// above from.
func (s *spillFiles) openRun(r *spillRun, from uint64) (*fileCursor, error) {
	f, err := s.fs.Open(r.path)
	if err != nil {
		return nil, fmt.Errorf("opening a restore's spill file: %w", err)
	}
	// The last indexed entry below from: the file's users ascend, each
	// once.
	i := max(0, sort.Search(len(r.index), func(i int) bool { return r.index[i].user >= from })-1)
	var at int64
	if i < len(r.index) {
		at = r.index[i].at
	}
	return &fileCursor{f: f, r: bufio.NewReaderSize(io.NewSectionReader(f, at, r.size-at), spillBuffer)}, nil
}

func (c *fileCursor) next() bool {
	if c.e != nil {
		return false
	}
	head := c.buf[:]
	if _, err := io.ReadFull(c.r, head); err != nil {
		if !errors.Is(err, io.EOF) {
			c.e = fmt.Errorf("reading a restore's spill file: %w", err)
		}
		return false
	}
	n := int32(binary.LittleEndian.Uint32(head[24:]))
	c.cur = latestHeader{
		user:    binary.LittleEndian.Uint64(head[0:]),
		follows: restoreOrder{parts: int32(binary.LittleEndian.Uint32(head[8:])), offset: int64(binary.LittleEndian.Uint64(head[12:]))},
		seq:     binary.LittleEndian.Uint32(head[20:]),
		has:     n >= 0,
	}
	c.turn ^= 1
	b := c.bufs[c.turn][:0]
	if n > 0 {
		b = slices.Grow(b, int(n))[:n]
		if _, err := io.ReadFull(c.r, b); err != nil {
			c.e = fmt.Errorf("reading a restore's spill file: %w", err)
			return false
		}
	}
	c.bufs[c.turn] = b
	if c.cur.has {
		c.cur.h = b
	}
	return true
}

func (c *fileCursor) head() *latestHeader { return &c.cur }
func (c *fileCursor) err() error          { return c.e }
func (c *fileCursor) close()              { _ = c.f.Close() }

// mergeLatest merges the cursors' entries, each cursor's sorted by
// compareLatest, and calls fn with each user's latest, in user order: the
// last of the user's entries. It returns fn's error, a cursor's, or ctx's.
// The entry fn is given is valid during the call only.
func mergeLatest(ctx context.Context, cs []headerCursor, fn func(*latestHeader) error) error {
	return mergeRange(ctx, cs, userRange{all: true}, fn)
}

// userRange is the users from from, below to unless all.
type userRange struct {
	from, to uint64
	all      bool // no end
}

func (r userRange) below(u uint64) bool { return r.all || u < r.to }

// mergeRange is mergeLatest for the users of r alone.
func mergeRange(ctx context.Context, cs []headerCursor, r userRange, fn func(*latestHeader) error) error {
	in := func(c headerCursor) bool {
		for c.next() {
			if u := c.head().user; u >= r.from {
				return r.below(u)
			}
		}
		return false
	}
	h := make(cursorHeap, 0, len(cs))
	for _, c := range cs {
		if in(c) {
			h = append(h, c)
		} else if err := c.err(); err != nil {
			return err
		}
	}
	heap.Init(&h)
	// One entry for every call of fn, which keeps none: one declared in
	// the loop escaped, an allocation per entry (two million at two
	// million records, and that much more heap for the collector).
	var x latestHeader
	for i := 0; len(h) > 0; i++ {
		if i%restoreChunk == 0 && ctx.Err() != nil {
			return ctx.Err()
		}
		c := h[0]
		x = *c.head()
		if c.next() && r.below(c.head().user) {
			heap.Fix(&h, 0)
		} else {
			if err := c.err(); err != nil {
				return err
			}
			heap.Pop(&h)
		}
		if len(h) > 0 && h[0].head().user == x.user {
			continue // a later record of the user's follows
		}
		if err := fn(&x); err != nil {
			return err
		}
	}
	return nil
}

// cursorHeap is a heap of cursors by their heads.
type cursorHeap []headerCursor

func (h cursorHeap) Len() int           { return len(h) }
func (h cursorHeap) Less(i, j int) bool { return compareLatest(h[i].head(), h[j].head()) < 0 }
func (h cursorHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *cursorHeap) Push(x any)        { *h = append(*h, x.(headerCursor)) }
func (h *cursorHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// restoreOrder is where the command a changelog record follows stands in
// its user's commands: under which commands partition count, at which
// offset of the user's partition under it. Counts only grow, and under
// one count every command of a user is applied in one partition, so a
// user's records compare by it in the order of the commands they follow,
// whichever changelog partition they were read from and in which order.
type restoreOrder struct {
	parts  int32
	offset int64
}

func (o restoreOrder) compare(p restoreOrder) int {
	if c := cmp.Compare(o.parts, p.parts); c != 0 {
		return c
	}
	return cmp.Compare(o.offset, p.offset)
}
