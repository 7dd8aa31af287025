package fanout

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"sort"
	"sync"
)

// Restore headers: each changelog record carries its user's state as a
// dump, and where the command it follows stands among the user's commands,
// so that a restore (handover.go) takes each user's latest record whatever
// changelog partition it was read from.

// restoreHeaderVersion is the first byte of a restore header, followed by
// the commands' partition count and the offset of the command the record
// follows (u32 BE, u64 BE) and the user's dump. Version 1 had no count.
const restoreHeaderVersion = 2

// latestOrder is the order of a record that follows no known command: a
// tombstone, or a record that names none. It is taken as the user's
// latest, so that it is never hidden by an older record with a restore
// header: such a user makes a restore replay instead.
var latestOrder = restoreOrder{parts: math.MaxInt32, offset: math.MaxInt64}

// appendRestoreHeader appends the head of a restore header for a record
// following the command at offset, applied under parts commands
// partitions; the dump follows.
func appendRestoreHeader(dst []byte, parts int32, offset int64) []byte {
	dst = append(dst, restoreHeaderVersion)
	dst = binary.BigEndian.AppendUint32(dst, uint32(parts))
	return binary.BigEndian.AppendUint64(dst, uint64(offset))
}

// parseRestoreHeader splits a restore header. A version-1 header reads
// with a count of 0: it precedes every record of this version.
func parseRestoreHeader(h []byte) (follows restoreOrder, dump []byte, err error) {
	switch {
	case len(h) >= 1+8 && h[0] == 1:
		follows.offset, dump = int64(binary.BigEndian.Uint64(h[1:9])), h[9:]
	case len(h) >= 1+4+8 && h[0] == restoreHeaderVersion:
		follows.parts = int32(binary.BigEndian.Uint32(h[1:5]))
		follows.offset, dump = int64(binary.BigEndian.Uint64(h[5:13])), h[13:]
	default:
		return restoreOrder{}, nil, fmt.Errorf("restore header of %d bytes, version %d", len(h), firstByte(h))
	}
	if follows.offset < 0 || follows.parts < 0 {
		return restoreOrder{}, nil, fmt.Errorf("restore header following offset %d under %d partitions", follows.offset, follows.parts)
	}
	return follows, dump, nil
}

func firstByte(b []byte) int {
	if len(b) == 0 {
		return -1
	}
	return int(b[0])
}

// restoreHeaders keeps the restore headers of the changelog records read,
// in the order read, for a restore to take each user's latest (merge). A
// partition of a million users is two million records when compaction has
// not run, so nothing here is per record on the heap: the headers are
// copied into an arena of large chunks and indexed by pointer-free
// entries, which the garbage collector does not trace, and no map grows
// by a million users (a map of cloned headers took most of the restore's
// time). The entries come in runs; each full run is sorted by a goroutine
// of its own while the read goes on, which leaves a merge of sorted runs.
//
// With a limit, the chunks and runs held never pass it (but for one
// header larger than the limit): before one more would, the runs held
// are merged, each user's latest alone, into a file of spill's, and their
// memory is used again (restorespill.go). The merge at the end then reads
// those files with the runs still held.
type restoreHeaders struct {
	chunks [][]byte
	runs   [][]headerRef // full runs, sorted or being sorted
	cur    []headerRef   // the run being filled
	n      int           // entries added
	sorts  sync.WaitGroup
	err    error // why the headers cannot be used (too many), or nil

	limit    int64              // bytes of chunks and runs held at most; 0: no limit
	more     func(n int64) bool // raises limit by n if it may; nil: never
	held     int64              // bytes of chunks and runs allocated, in use or free
	chunkLen int                // the size of a chunk
	runLen   int                // the entries of a run
	free     [][]byte
	freeRuns [][]headerRef
	spill    *spillFiles // nil without a limit
	failed   error       // a spill that failed: a storage failure
}

// headerRef is where a record's restore header is in the arena.
type headerRef struct {
	user    uint64
	follows restoreOrder // the command the record follows
	seq     uint32       // the record's place in the order read
	chunk   uint32
	at      uint32
	n       int32 // the header's length; -1 for a record without one
}

// compareRefs orders refs by user, then by the commands they follow,
// then in the order read: a user's latest record is the one that follows
// its latest command, whatever changelog partition it was read from.
func compareRefs(a, b headerRef) int {
	if c := cmp.Compare(a.user, b.user); c != 0 {
		return c
	}
	if c := a.follows.compare(b.follows); c != 0 {
		return c
	}
	return cmp.Compare(a.seq, b.seq)
}

const (
	// headerChunk is the size of an arena chunk: a few thousand headers
	// (a user's dump with a long history may be larger; it gets a chunk
	// alone).
	headerChunk = 1 << 20
	// headerRun is how many entries a run holds: sorted in a few tens of
	// milliseconds, and few runs to merge at millions of records.
	headerRun = 1 << 18
	// headerRefBytes is the size of a headerRef, as a limit counts it.
	headerRefBytes = 40
)

// newRestoreHeaders returns empty restoreHeaders that hold at most
// to.limit bytes (none: no limit), spilling to to's files beyond. Under a
// small limit, chunks and runs are smaller, so that a quarter of the
// limit holds several of each.
func newRestoreHeaders(to spillTo) *restoreHeaders {
	hs := &restoreHeaders{chunkLen: headerChunk, runLen: headerRun}
	if to.limit > 0 {
		hs.limit, hs.more = to.limit, to.more
		hs.chunkLen = int(min(max(to.limit/4, 4<<10), headerChunk))
		hs.runLen = int(min(max(to.limit/(4*headerRefBytes), 64), headerRun))
		hs.spill = newSpillFiles(to)
	}
	return hs
}

// add appends user's record's header h (has false: the record has none),
// which follows the command follows names.
func (hs *restoreHeaders) add(user uint64, h []byte, has bool, follows restoreOrder) {
	if hs.err != nil || hs.failed != nil {
		return
	}
	if hs.n == math.MaxUint32 || len(h) > math.MaxInt32 {
		hs.err = fmt.Errorf("more than %d changelog records, or a restore header of %d bytes", math.MaxUint32, len(h))
		return
	}
	// Room for the header and its entry first: a spill moves every chunk
	// and run to the free lists.
	last := len(hs.chunks) - 1
	needChunk := has && (last < 0 || len(hs.chunks[last])+len(h) > cap(hs.chunks[last]))
	needRun := hs.cur == nil
	var fresh int64 // bytes the free lists cannot give
	if needChunk && (len(h) > hs.chunkLen || len(hs.free) == 0) {
		fresh += int64(max(hs.chunkLen, len(h)))
	}
	if needRun && len(hs.freeRuns) == 0 {
		fresh += int64(hs.runLen) * headerRefBytes
	}
	if fresh > 0 && !hs.room(fresh) {
		if hs.failed = hs.spillHeld(); hs.failed != nil {
			return
		}
		needChunk, needRun = has, true
	}
	if needChunk && len(h) > hs.chunkLen {
		// A chunk of its own for the header: the free chunks give way.
		for len(hs.free) > 0 && hs.limit > 0 && hs.held+int64(len(h)) > hs.limit {
			hs.held -= int64(cap(hs.free[len(hs.free)-1]))
			hs.free = hs.free[:len(hs.free)-1]
		}
	}
	if needChunk {
		switch size := max(hs.chunkLen, len(h)); {
		case size == hs.chunkLen && len(hs.free) > 0:
			hs.chunks = append(hs.chunks, hs.free[len(hs.free)-1][:0])
			hs.free = hs.free[:len(hs.free)-1]
		default:
			hs.held += int64(size)
			hs.chunks = append(hs.chunks, make([]byte, 0, size))
		}
	}
	if needRun {
		if n := len(hs.freeRuns); n > 0 {
			hs.cur, hs.freeRuns = hs.freeRuns[n-1][:0], hs.freeRuns[:n-1]
		} else {
			hs.held += int64(hs.runLen) * headerRefBytes
			hs.cur = make([]headerRef, 0, hs.runLen)
		}
	}
	ref := headerRef{user: user, follows: follows, seq: uint32(hs.n), n: -1}
	if has {
		last = len(hs.chunks) - 1
		ref.chunk, ref.at, ref.n = uint32(last), uint32(len(hs.chunks[last])), int32(len(h))
		hs.chunks[last] = append(hs.chunks[last], h...)
	}
	hs.cur = append(hs.cur, ref)
	hs.n++
	if len(hs.cur) == cap(hs.cur) {
		run := hs.cur
		hs.runs = append(hs.runs, run)
		hs.cur = nil
		hs.sorts.Add(1)
		go func() {
			defer hs.sorts.Done()
			slices.SortFunc(run, compareRefs)
		}()
	}
}

// room reports whether n more bytes may be allocated: always without a
// limit, and with nothing to spill; otherwise within the limit, or
// beyond it if more raises it.
func (hs *restoreHeaders) room(n int64) bool {
	switch {
	case hs.limit == 0 || hs.held+n <= hs.limit || (len(hs.runs) == 0 && len(hs.cur) == 0):
		return true
	case hs.more != nil && hs.more(hs.held+n-hs.limit):
		hs.limit = hs.held + n
		return true
	}
	return false
}

// wait waits for the runs being sorted. A merge calls it; a reader that
// drops hs calls it too, so that no sort outlives the read.
func (hs *restoreHeaders) wait() { hs.sorts.Wait() }

// header returns the header ref points at; ref.n >= 0.
func (hs *restoreHeaders) header(ref headerRef) []byte {
	return hs.chunks[ref.chunk][ref.at : ref.at+uint32(ref.n)]
}

// sorted sorts the run being filled and waits for the others: every run
// held is sorted. It returns them.
func (hs *restoreHeaders) sorted() [][]headerRef {
	if len(hs.cur) > 0 {
		slices.SortFunc(hs.cur, compareRefs)
		hs.runs = append(hs.runs, hs.cur)
		hs.cur = nil
	}
	hs.wait()
	return hs.runs
}

// spilled returns the bytes written to spill files.
func (hs *restoreHeaders) spilled() int64 {
	if hs.spill == nil {
		return 0
	}
	return hs.spill.bytes
}

// done drops what hs holds: its sorts are waited for, its headers
// dropped and its spill files removed. It may be called again.
func (hs *restoreHeaders) done() {
	hs.wait()
	hs.chunks, hs.runs, hs.cur, hs.free, hs.freeRuns = nil, nil, nil, nil, nil
	if hs.spill != nil {
		hs.spill.remove()
	}
}

// spillHeld writes every run held to a spill file, each user's latest
// entry alone, and frees the runs and chunks for the read to go on. Its
// error is a storage failure.
func (hs *restoreHeaders) spillHeld() error {
	runs := hs.sorted()
	cs := make([]headerCursor, 0, len(runs))
	for _, r := range runs {
		cs = append(cs, &memCursor{hs: hs, refs: r})
	}
	if _, err := hs.spill.write(func(put func(*latestHeader) error) error {
		return mergeLatest(context.Background(), cs, put)
	}); err != nil {
		return err
	}
	for _, c := range hs.chunks {
		if cap(c) == hs.chunkLen {
			hs.free = append(hs.free, c[:0])
		} else {
			hs.held -= int64(cap(c)) // a header larger than a chunk
		}
	}
	for _, r := range runs {
		hs.freeRuns = append(hs.freeRuns, r[:0])
	}
	hs.chunks, hs.runs, hs.cur = hs.chunks[:0], hs.runs[:0], nil
	return nil
}

// prepare readies hs for the merges of the restore's workers: every run
// held sorted, and no more spill files than spillFanIn, groups of them
// merged into one. merging, if it merges, is told how far: entries read
// of the spill files, of total (what they would be if no user were in
// two of them: a merge keeps one entry of a user's), with finished at
// the end.
func (hs *restoreHeaders) prepare(ctx context.Context, merging func(done, total int64, finished bool)) error {
	hs.sorted()
	if hs.spill == nil || len(hs.spill.runs) <= spillFanIn {
		return nil
	}
	s := hs.spill
	// The merges to come, on entry counts: the groups go round, the
	// merged file last, so each entry is read about log16(files) times.
	var total, done int64
	counts := make([]int64, len(s.runs))
	for i, r := range s.runs {
		counts[i] = r.entries
	}
	for len(counts) > spillFanIn {
		var sum int64
		for _, n := range counts[:spillFanIn] {
			sum += n
		}
		total += sum
		counts = append(counts[spillFanIn:], sum)
	}
	merging(0, total, false)
	for len(s.runs) > spillFanIn {
		group := s.runs[:spillFanIn]
		cs := make([]headerCursor, 0, len(group))
		closeAll := func() {
			for _, c := range cs {
				c.close()
			}
		}
		for _, r := range group {
			c, err := s.openRun(r, 0)
			if err != nil {
				closeAll()
				return err
			}
			cs = append(cs, c)
			done += r.entries
		}
		rest := slices.Clone(s.runs[spillFanIn:])
		s.runs = nil
		_, err := s.write(func(put func(*latestHeader) error) error { return mergeLatest(ctx, cs, put) })
		closeAll()
		if err != nil {
			return err
		}
		merged := s.runs[0]
		for _, r := range group {
			_ = s.fs.Remove(r.path)
		}
		s.runs = append(rest, merged)
		merging(done, total, false)
	}
	merging(done, total, true)
	return nil
}

// cursors returns cursors on the entries of hs (prepared) from the first
// of a user at or above from.
func (hs *restoreHeaders) cursors(from uint64) ([]headerCursor, error) {
	var cs []headerCursor
	for _, r := range hs.runs {
		i := sort.Search(len(r), func(i int) bool { return r[i].user >= from })
		cs = append(cs, &memCursor{hs: hs, refs: r[i:]})
	}
	if hs.spill != nil {
		for _, r := range hs.spill.runs {
			c, err := hs.spill.openRun(r, from)
			if err != nil {
				for _, c := range cs {
					c.close()
				}
				return nil, err
			}
			cs = append(cs, c)
		}
	}
	return cs, nil
}

// split returns the users that split hs's entries (prepared) into n
// ranges of about as many entries: n-1 of them, ascending, from a sample
// of every run's and spill file's users.
func (hs *restoreHeaders) split(n int) []uint64 {
	var sample []uint64
	for _, r := range hs.runs {
		for i := 0; i < len(r); i += spillIndexEvery {
			sample = append(sample, r[i].user)
		}
	}
	if hs.spill != nil {
		for _, r := range hs.spill.runs {
			for _, x := range r.index {
				sample = append(sample, x.user)
			}
		}
	}
	slices.Sort(sample)
	var bounds []uint64
	for i := 1; i < n && len(sample) > 0; i++ {
		bounds = append(bounds, sample[i*len(sample)/n])
	}
	return bounds
}

// memCursor goes through a sorted run held, from refs[0].
type memCursor struct {
	hs   *restoreHeaders
	refs []headerRef
	cur  latestHeader
}

func (c *memCursor) next() bool {
	if len(c.refs) == 0 {
		return false
	}
	ref := c.refs[0]
	c.refs = c.refs[1:]
	c.cur = latestHeader{user: ref.user, follows: ref.follows, seq: ref.seq, has: ref.n >= 0}
	if c.cur.has {
		c.cur.h = c.hs.header(ref)
	} else {
		c.cur.h = nil
	}
	return true
}

func (c *memCursor) head() *latestHeader { return &c.cur }
func (c *memCursor) err() error          { return nil }
func (c *memCursor) close()              {}
