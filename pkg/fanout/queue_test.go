package fanout

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

func TestQueue(t *testing.T) {
	var q queue
	if _, ok := q.peek(); ok || q.len() != 0 || q.bytes != 0 {
		t.Fatal("new queue not empty")
	}
	const n = 5000
	for i := range n {
		q.push(&kgo.Record{Offset: int64(i), Key: []byte("k"), Value: []byte("vv"),
			Headers: []kgo.RecordHeader{{Key: "h", Value: []byte("x")}}}, reading{mono: int64(i), high: int64(2 * i)})
	}
	if q.len() != n || q.bytes != n*5 {
		t.Fatalf("len %d bytes %d, want %d and %d", q.len(), q.bytes, n, n*5)
	}
	for i := range n - 1 {
		h, ok := q.peek()
		if !ok || h.r.Offset != int64(i) || h.fetchedMono != int64(i) || h.seenNs != int64(2*i) {
			t.Fatalf("peek %d = %+v, %v", i, h, ok)
		}
		q.pop()
	}
	if cap(q.recs) > 0 && len(q.recs) > n/2 {
		t.Fatalf("queue kept %d slots for 1 record: not compacted", len(q.recs))
	}
	if h, _ := q.peek(); h.r.Offset != n-1 || q.bytes != 5 {
		t.Fatalf("last = %d, bytes %d", h.r.Offset, q.bytes)
	}
	q.pop()
	if q.len() != 0 || q.bytes != 0 || len(q.recs) != 0 {
		t.Fatalf("drained queue: len %d bytes %d slots %d", q.len(), q.bytes, len(q.recs))
	}
	q.push(&kgo.Record{Value: []byte("abc")}, reading{})
	q.reset()
	if q.len() != 0 || q.bytes != 0 {
		t.Fatal("reset left records")
	}
}
