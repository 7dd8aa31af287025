package fanout

import (
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

func TestOutboxRoundTrip(t *testing.T) {
	r := &kgo.Record{
		Topic: "cohortgate.dlq", Key: []byte{0, 1, 0xff}, Value: []byte(`{"op":"x"}`),
		Headers:   []kgo.RecordHeader{{Key: "a", Value: []byte("1")}, {Key: "b"}},
		Timestamp: time.Unix(0, 1764633600123000000),
	}
	for _, partition := range []int32{-1, 0, 7} {
		e := outboxFrom(r, partition)
		back, err := decodeOutbox(encodeOutbox(e))
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(back, e) {
			t.Fatalf("round trip:\n%+v\n%+v", back, e)
		}
		out := outboxItem{seq: 1, e: back}.record()
		if out.Topic != r.Topic || string(out.Key) != string(r.Key) || string(out.Value) != string(r.Value) ||
			!out.Timestamp.Equal(r.Timestamp) || len(out.Headers) != 2 || out.Headers[0].Key != "a" {
			t.Fatalf("record() = %+v", out)
		}
		pinned := isPinned(out)
		if pinned != (partition >= 0) || (pinned && out.Partition != partition) {
			t.Fatalf("partition %d: pinned %v to %d", partition, pinned, out.Partition)
		}
	}
}

func TestDecodeOutboxRejects(t *testing.T) {
	for name, in := range map[string]string{
		"empty":         ``,
		"no topic":      `{"partition":-1,"ts_ns":0}`,
		"bad partition": `{"topic":"t","partition":-2,"ts_ns":0}`,
		"unknown field": `{"topic":"t","partition":-1,"ts_ns":0,"x":1}`,
		"trailing":      `{"topic":"t","partition":-1,"ts_ns":0} {}`,
		"bad base64":    `{"topic":"t","partition":-1,"key":"%%","ts_ns":0}`,
	} {
		if _, err := decodeOutbox([]byte(in)); !errors.Is(err, errOutboxCorrupt) {
			t.Errorf("%s: decodeOutbox(%q) = %v, want errOutboxCorrupt", name, in, err)
		}
	}
}

type deleted struct{ through []uint64 }

func (d *deleted) DeleteOutbox(through uint64) error {
	d.through = append(d.through, through)
	return nil
}

func (d *deleted) Outbox(func(seq uint64, value []byte) error) error { return nil }

func TestOutboxQueue(t *testing.T) {
	var d deleted
	o := outbox{store: &d}
	o.add(outboxItem{seq: 1}, outboxItem{seq: 2})
	first := o.take()
	o.add(outboxItem{seq: 3})
	o.putBack(first) // the cycle that produced 1 and 2 aborted
	got := o.take()
	if len(got) != 3 || got[0].seq != 1 || got[1].seq != 2 || got[2].seq != 3 {
		t.Fatalf("after putBack: %+v, want seqs 1 2 3", got)
	}
	if o.stored.Load() != 3 {
		t.Fatalf("stored %d, want 3", o.stored.Load())
	}
	if err := o.delivered(3); err != nil || len(d.through) != 1 || d.through[0] != 3 || o.stored.Load() != 0 {
		t.Fatalf("delivered: %v %v stored %d", err, d.through, o.stored.Load())
	}
}

// FuzzDecodeOutbox checks that decoding never panics and that an accepted
// entry encodes back to an entry that decodes the same.
func FuzzDecodeOutbox(f *testing.F) {
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := decodeOutbox(b)
		if err != nil {
			if !errors.Is(err, errOutboxCorrupt) {
				t.Fatalf("error %v does not wrap errOutboxCorrupt", err)
			}
			return
		}
		again, err := decodeOutbox(encodeOutbox(e))
		if err != nil || !reflect.DeepEqual(normalize(again), normalize(e)) {
			t.Fatalf("round trip: %+v, %v; want %+v", again, err, e)
		}
	})
}

// normalize maps empty byte slices to nil: JSON cannot tell them apart.
func normalize(e outboxEntry) outboxEntry {
	if len(e.Key) == 0 {
		e.Key = nil
	}
	if len(e.Value) == 0 {
		e.Value = nil
	}
	for i := range e.Headers {
		if len(e.Headers[i].Value) == 0 {
			e.Headers[i].Value = nil
		}
	}
	if len(e.Headers) == 0 {
		e.Headers = nil
	}
	return e
}
