package fanout

import (
	"context"
	"encoding/binary"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cohortgate/cohortgate/topics"
)

// TestRestartAfterBrokerCrashWithOpenTransaction: the embedded broker,
// killed while a transaction on the changelog is open (the processor's
// own, killed with it), aborts that transaction when it replays its log at
// the next start, but writes no marker after its records. A read_committed
// read to the changelog's end never got a record at the end's offset less
// one, and the processor's first read of the changelog after the restart
// (its claim's late-leave windows) waited for the partition's next
// record; the claim's commands waited for the read: a leave sent then was
// not in force for the read's five minutes. The read now ends as soon as
// it finds the tail aborted.
func TestRestartAfterBrokerCrashWithOpenTransaction(t *testing.T) {
	set := topics.Defaults()
	var names []string
	for _, s := range set.Specs() {
		names = append(names, string(s.Topic))
	}
	dir, image := filepath.Join(t.TempDir(), "broker"), filepath.Join(t.TempDir(), "crashed")
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(1, names...), kfake.DataDir(dir))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cfg := Config{CreateTopics: true, Partitions: 1, Grace: 10 * time.Millisecond, CommitInterval: 20 * time.Millisecond,
		ExactlyOnce: true, TransactionalID: "crash-test"}
	store := memStore(t)

	// A first run applies a leave (a changelog record) and commits its
	// offsets with their metadata: the next owner recovers its windows.
	first := newOnFake(t, c, set, cfg, store)
	r := startRun(first)
	waitReady(t, first)
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	const user = 7
	at := time.Now()
	if err := cl.ProduceSync(ctx, leaveRecord(set, user, at)).FirstErr(); err != nil {
		t.Fatal(err)
	}
	cl.Close()
	waitFor(t, "the leave applied", func() bool { return !first.gate.Allows(user, uint64(at.Add(time.Second).UnixNano())) })
	if err := r.stop(); err != nil {
		t.Fatal(err)
	}

	// Then the broker is killed while a transaction on the changelog is
	// open: its files copied as they are.
	txn, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.TransactionalID("killed-with-the-broker"),
		kgo.DefaultProduceTopic(string(set.Changelog)))
	if err != nil {
		t.Fatal(err)
	}
	if err := txn.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	rec := &kgo.Record{Key: []byte("8"), Value: []byte(`{}`)}
	if err := txn.ProduceSync(ctx, rec).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("cp", "-a", dir, image).CombinedOutput(); err != nil {
		t.Fatalf("copying the broker's files: %v: %s", err, out)
	}
	txn.Close()
	c.Close()

	crashed, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DataDir(image))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(crashed.Close)
	var reads atomic.Int32
	cfg.EventListener.WindowsRecovered = func(WindowsRecoveredInfo) { reads.Add(1) }
	p := newOnFake(t, crashed, set, cfg, store)
	runTillEnd(t, p)
	waitReady(t, p)
	// The claim's windows are recovered while its commands are idle: a
	// leave waits for that read.
	cl, err = kgo.NewClient(kgo.SeedBrokers(crashed.ListenAddrs()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	const next = 9
	at = time.Now()
	if err := cl.ProduceSync(ctx, leaveRecord(set, next, at)).FirstErr(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "a leave in force after the restart", func() bool { return !p.gate.Allows(next, uint64(at.Add(time.Second).UnixNano())) })
	if reads.Load() == 0 {
		t.Fatal("no read of the changelog after the restart: the test does not test the read")
	}
}

// TestScanTail: the records of a fetch answer, as a consumer with
// read_committed sees them between two offsets.
func TestScanTail(t *testing.T) {
	const data, txnal, control = 0, 0x10, 0x30
	batch := func(first int64, records int32, attrs int16, producer int64) []byte {
		rb := kmsg.RecordBatch{FirstOffset: first, LastOffsetDelta: records - 1, Attributes: attrs, ProducerID: producer,
			Magic: 2, NumRecords: records}
		b := rb.AppendTo(nil)
		binary.BigEndian.PutUint32(b[8:12], uint32(len(b)-12)) // the length of what follows it
		return b
	}
	aborted := func(producer, first int64) kmsg.FetchResponseTopicPartitionAbortedTransaction {
		return kmsg.FetchResponseTopicPartitionAbortedTransaction{ProducerID: producer, FirstOffset: first}
	}
	join := func(bs ...[]byte) []byte {
		var out []byte
		for _, b := range bs {
			out = append(out, b...)
		}
		return out
	}
	for _, tc := range []struct {
		name        string
		b           []byte
		aborted     []kmsg.FetchResponseTopicPartitionAbortedTransaction
		at, end     int64
		next        int64
		deliverable bool
	}{
		{name: "aborted without a marker", b: batch(5, 2, txnal, 7), aborted: []kmsg.FetchResponseTopicPartitionAbortedTransaction{aborted(7, 5)},
			at: 5, end: 7, next: 7},
		{name: "committed data", b: batch(5, 2, txnal, 7), at: 5, end: 7, next: 5, deliverable: true},
		{name: "plain data", b: batch(5, 1, data, -1), at: 5, end: 6, next: 5, deliverable: true},
		{name: "aborted, marker, then another transaction of the producer", b: join(batch(5, 1, txnal, 7), batch(6, 1, control, 7), batch(7, 1, txnal, 7)),
			aborted: []kmsg.FetchResponseTopicPartitionAbortedTransaction{aborted(7, 5)}, at: 5, end: 8, next: 7, deliverable: true},
		{name: "aborted twice", b: join(batch(5, 1, txnal, 7), batch(6, 1, control, 7), batch(7, 1, txnal, 7)),
			aborted: []kmsg.FetchResponseTopicPartitionAbortedTransaction{aborted(7, 7), aborted(7, 5)}, at: 5, end: 8, next: 8},
		{name: "another producer's committed records among the aborted", b: join(batch(5, 1, txnal, 7), batch(6, 1, txnal, 8)),
			aborted: []kmsg.FetchResponseTopicPartitionAbortedTransaction{aborted(7, 5)}, at: 5, end: 7, next: 6, deliverable: true},
		{name: "a batch beginning below at", b: join(batch(0, 3, data, -1), batch(3, 2, txnal, 7)),
			aborted: []kmsg.FetchResponseTopicPartitionAbortedTransaction{aborted(7, 3)}, at: 2, end: 5, next: 2, deliverable: true},
		{name: "the batch of at skipped when wholly below", b: join(batch(0, 2, data, -1), batch(2, 3, txnal, 7)),
			aborted: []kmsg.FetchResponseTopicPartitionAbortedTransaction{aborted(7, 2)}, at: 2, end: 5, next: 5},
		{name: "stops at end", b: join(batch(5, 1, txnal, 7), batch(6, 1, data, -1)),
			aborted: []kmsg.FetchResponseTopicPartitionAbortedTransaction{aborted(7, 5)}, at: 5, end: 6, next: 6},
		{name: "last batch cut", b: join(batch(5, 1, txnal, 7), batch(6, 1, data, -1)[:20]),
			aborted: []kmsg.FetchResponseTopicPartitionAbortedTransaction{aborted(7, 5)}, at: 5, end: 8, next: 6},
		{name: "nothing", b: nil, at: 5, end: 8, next: 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			next, deliverable := scanTail(tc.b, tc.aborted, make(map[int64]bool), tc.at, tc.end)
			if next != tc.next || deliverable != tc.deliverable {
				t.Errorf("scanTail = %d, %v; want %d, %v", next, deliverable, tc.next, tc.deliverable)
			}
		})
	}
}

// FuzzScanTail: any answer, however malformed, is read without a panic,
// and what scanTail says it read whole never goes back.
func FuzzScanTail(f *testing.F) {
	rb := kmsg.RecordBatch{FirstOffset: 5, LastOffsetDelta: 1, Attributes: 0x10, ProducerID: 7, Magic: 2, NumRecords: 2}
	seed := rb.AppendTo(nil)
	binary.BigEndian.PutUint32(seed[8:12], uint32(len(seed)-12))
	f.Add(seed, int64(7), int64(5), int64(5), int64(8))
	f.Add([]byte{}, int64(0), int64(0), int64(0), int64(1))
	f.Fuzz(func(t *testing.T, b []byte, producer, first, at, end int64) {
		aborted := []kmsg.FetchResponseTopicPartitionAbortedTransaction{{ProducerID: producer, FirstOffset: first}}
		next, _ := scanTail(b, aborted, make(map[int64]bool), at, end)
		if next < at {
			t.Fatalf("next %d below at %d", next, at)
		}
	})
}
