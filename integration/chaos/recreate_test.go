package main

import (
	"bytes"
	"context"
	"io"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/integration/workload"
	"github.com/cohortgate/cohortgate/topics"
)

// TestRecreateRefill runs recreate's topic work on the in-process broker:
// the committed records of the commands topic are read with the
// processors' re-published copies and an aborted transaction left out;
// the topic is created again (another topic ID); the refill puts every
// kept record back in its partition, in order, and then fresh users'
// leaves, each in its key's partition, until every partition ends
// refillPast past the old end.
func TestRecreateRefill(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	h, err := newHarness(ctx, &options{partitions: 3, workDir: t.TempDir()}, io.Discard, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	defer h.close()
	r := &scenarioRun{h: h, set: workload.Topics("t"), sc: scenario{name: "recreate"}}
	if err := workload.CreateTopics(ctx, h.adm, r.set, 3, 1); err != nil {
		t.Fatal(err)
	}
	commands := string(r.set.Commands)
	cl, err := kgo.NewClient(kgo.SeedBrokers(h.brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()), kgo.TransactionalID("t-txn"))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	rec := func(p int32, v string, hs ...kgo.RecordHeader) *kgo.Record {
		return &kgo.Record{Topic: commands, Partition: p, Key: []byte("1"), Value: []byte(v), Headers: hs}
	}
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, rec(0, "a"), rec(0, "b"), rec(1, "c"),
		rec(2, "copy", kgo.RecordHeader{Key: topics.HeaderMisroutedFrom, Value: []byte("0/1")})).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
		t.Fatal(err)
	}
	if err := cl.BeginTransaction(); err != nil {
		t.Fatal(err)
	}
	if err := cl.ProduceSync(ctx, rec(1, "aborted")).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := cl.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.Fatal(err)
	}

	oldEnds, err := r.endOffsets(ctx, commands)
	if err != nil {
		t.Fatal(err)
	}
	kept, copies, err := r.readCommitted(ctx, commands, oldEnds)
	if err != nil {
		t.Fatal(err)
	}
	if got := values(kept); copies != 1 || got != "0:a 0:b 1:c" {
		t.Fatalf("kept %q and %d copies; want 0:a 0:b 1:c and 1", got, copies)
	}
	before, err := h.adm.ListTopics(ctx, commands)
	if err != nil {
		t.Fatal(err)
	}
	id, err := r.recreateTopic(ctx, r.set.Commands)
	if err != nil {
		t.Fatal(err)
	}
	if before[commands].ID == id {
		t.Fatalf("topic ID %v before and after", id)
	}
	users, err := r.refill(ctx, kept, oldEnds)
	if err != nil {
		t.Fatal(err)
	}
	newEnds, err := r.endOffsets(ctx, commands)
	if err != nil {
		t.Fatal(err)
	}
	refilled, _, err := r.readCommitted(ctx, commands, newEnds)
	if err != nil {
		t.Fatal(err)
	}
	var fresh int
	var copied []*kgo.Record
	for p := range int32(3) {
		if newEnds[p] != oldEnds[p]+refillPast {
			t.Errorf("partition %d ends at %d, want %d past the old end %d", p, newEnds[p], refillPast, oldEnds[p])
		}
	}
	for _, rec := range refilled {
		if !bytes.HasPrefix(rec.Value, []byte(`{"op":"leave"`)) {
			copied = append(copied, rec)
			continue
		}
		fresh++
		if id, err := topics.ParseUserID(rec.Key); err != nil || id < freshUsers || murmurPartition(rec.Key, 3) != rec.Partition {
			t.Errorf("a refill leave with key %q in partition %d", rec.Key, rec.Partition)
		}
	}
	if got := values(copied); got != "0:a 0:b 1:c" {
		t.Errorf("the copied records come back as %q", got)
	}
	for p := range int32(3) { // the copies first, then the leaves
		seenLeave := false
		for _, rec := range refilled {
			isLeave := bytes.HasPrefix(rec.Value, []byte(`{"op":"leave"`))
			if rec.Partition == p && seenLeave && !isLeave {
				t.Errorf("partition %d: copied record %q after a refill leave", p, rec.Value)
			}
			seenLeave = seenLeave || (rec.Partition == p && isLeave)
		}
	}
	if fresh != len(users) || fresh != int(newEnds[0]+newEnds[1]+newEnds[2])-len(kept) {
		t.Errorf("%d fresh leaves, %d users, ends %v", fresh, len(users), newEnds)
	}
}

// values renders records as "<partition>:<value>" in partition order.
func values(recs []*kgo.Record) string {
	var b bytes.Buffer
	for p := range int32(3) {
		for _, r := range recs {
			if r.Partition == p {
				if b.Len() > 0 {
					b.WriteByte(' ')
				}
				b.WriteString(string(rune('0'+p)) + ":" + string(r.Value))
			}
		}
	}
	return b.String()
}
