package fanout

import (
	"cmp"
	"container/heap"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
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

// latestOrder is the order of a record that follows no known command: a
// tombstone, or a record that names none. It is taken as the user's
// latest, so that it is never hidden by an older record with a restore
// header: such a user makes a restore replay instead.
var latestOrder = restoreOrder{parts: math.MaxInt32, offset: math.MaxInt64}

func (o restoreOrder) compare(p restoreOrder) int {
	if c := cmp.Compare(o.parts, p.parts); c != 0 {
		return c
	}
	return cmp.Compare(o.offset, p.offset)
}

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
// in the order read, for a restore to take each user's latest
// (latest). A partition of a million users is two million records when
// compaction has not run, so nothing here is per record on the heap: the
// headers are copied into an arena of large chunks and indexed by
// pointer-free entries, which the garbage collector does not trace, and
// no map grows by a million users (a map of cloned headers took most of
// the restore's time). The entries come in runs of headerRun; each full
// run is sorted by a goroutine of its own while the read goes on, which
// leaves latest a merge of sorted runs.
type restoreHeaders struct {
	chunks [][]byte
	runs   [][]headerRef // full runs, sorted or being sorted
	cur    []headerRef   // the run being filled
	n      int           // entries added
	sorts  sync.WaitGroup
	err    error // why the headers cannot be used (too many), or nil
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
)

// add appends user's record's header h (has false: the record has none),
// which follows the command follows names.
func (hs *restoreHeaders) add(user uint64, h []byte, has bool, follows restoreOrder) {
	if hs.err != nil {
		return
	}
	if hs.n == math.MaxUint32 || len(h) > math.MaxInt32 {
		hs.err = fmt.Errorf("more than %d changelog records, or a restore header of %d bytes", math.MaxUint32, len(h))
		return
	}
	ref := headerRef{user: user, follows: follows, seq: uint32(hs.n), n: -1}
	if has {
		last := len(hs.chunks) - 1
		if last < 0 || len(hs.chunks[last])+len(h) > cap(hs.chunks[last]) {
			hs.chunks = append(hs.chunks, make([]byte, 0, max(headerChunk, len(h))))
			last++
		}
		ref.chunk, ref.at, ref.n = uint32(last), uint32(len(hs.chunks[last])), int32(len(h))
		hs.chunks[last] = append(hs.chunks[last], h...)
	}
	if hs.cur == nil {
		hs.cur = make([]headerRef, 0, headerRun)
	}
	hs.cur = append(hs.cur, ref)
	hs.n++
	if len(hs.cur) == headerRun {
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

// wait waits for the runs being sorted. latest calls it; a reader that
// drops hs calls it too, so that no sort outlives the read.
func (hs *restoreHeaders) wait() { hs.sorts.Wait() }

// header returns the header ref points at; ref.n >= 0.
func (hs *restoreHeaders) header(ref headerRef) []byte {
	return hs.chunks[ref.chunk][ref.at : ref.at+uint32(ref.n)]
}

// latest merges the sorted runs and keeps each user's latest entry,
// returning them in user order and how many of them have no header.
func (hs *restoreHeaders) latest() (refs []headerRef, missing int) {
	slices.SortFunc(hs.cur, compareRefs)
	hs.wait()
	runs := hs.runs
	if len(hs.cur) > 0 {
		runs = append(runs, hs.cur)
	}
	hs.runs, hs.cur = nil, nil
	// A k-way merge: the head of every run in a small heap. Runs hold
	// records in the order read, so a user's entries pop in that order
	// and the last popped is the latest.
	out := make([]headerRef, 0, hs.n)
	h := make(refHeap, 0, len(runs))
	for _, r := range runs {
		if len(r) > 0 {
			h = append(h, r)
		}
	}
	heap.Init(&h)
	for len(h) > 0 {
		ref := h[0][0]
		if h[0] = h[0][1:]; len(h[0]) == 0 {
			heap.Pop(&h)
		} else {
			heap.Fix(&h, 0)
		}
		if n := len(out); n > 0 && out[n-1].user == ref.user {
			out[n-1] = ref
			continue
		}
		out = append(out, ref)
	}
	for _, ref := range out {
		if ref.n < 0 {
			missing++
		}
	}
	return out, missing
}

// refHeap is a heap of sorted runs by their heads.
type refHeap [][]headerRef

func (h refHeap) Len() int           { return len(h) }
func (h refHeap) Less(i, j int) bool { return compareRefs(h[i][0], h[j][0]) < 0 }
func (h refHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *refHeap) Push(x any)        { *h = append(*h, x.([]headerRef)) }
func (h *refHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
