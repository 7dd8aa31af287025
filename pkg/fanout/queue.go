package fanout

import "github.com/twmb/franz-go/pkg/kgo"

// queue holds the fetched, undecided signals of one partition in offset
// order. Only the main loop touches it.
type queue struct {
	recs  []held // recs[head:] are undecided
	head  int
	bytes int64 // sum of userBytes over recs[head:]
}

// held is a fetched signal and the clock when it was fetched: fetchedMono
// (monotonic ns) for the time it is held, seenNs (the high reading, ns
// since the Unix epoch) for its future skew, checked at first sight.
type held struct {
	r           *kgo.Record
	fetchedMono int64
	seenNs      int64
}

func (q *queue) push(r *kgo.Record, fetched reading) {
	q.recs = append(q.recs, held{r, fetched.mono, fetched.high})
	q.bytes += userBytes(r)
}

func (q *queue) len() int { return len(q.recs) - q.head }

// peek returns the oldest undecided record; ok is false when there is none.
func (q *queue) peek() (h held, ok bool) {
	if q.head == len(q.recs) {
		return held{}, false
	}
	return q.recs[q.head], true
}

// pop drops the oldest undecided record. The backing array is reused once
// drained, and compacted when more than half of it is decided, so a queue
// that never empties does not grow without bound.
func (q *queue) pop() {
	q.bytes -= userBytes(q.recs[q.head].r)
	q.recs[q.head] = held{}
	q.head++
	switch {
	case q.head == len(q.recs):
		q.recs, q.head = q.recs[:0], 0
	case q.head > 1024 && q.head > len(q.recs)/2:
		n := copy(q.recs, q.recs[q.head:])
		clear(q.recs[n:])
		q.recs, q.head = q.recs[:n], 0
	}
}

func (q *queue) reset() {
	clear(q.recs)
	q.recs, q.head, q.bytes = q.recs[:0], 0, 0
}
