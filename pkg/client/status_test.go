package client_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/pkg/client"
	"github.com/cohortgate/cohortgate/topics"
)

// TestStatusGrownChangelog: a changelog made with 1 partition and grown to
// 2 while the commands have 2. The user's records sit in both changelog
// partitions; its latest is the one that follows its latest command, by
// (command.partitions, command.offset), not the one in the partition its
// key gives under the present count, nor the last one read.
func TestStatusGrownChangelog(t *testing.T) {
	set := topics.Defaults()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(2, string(set.Commands), string(set.DLQ)),
		kfake.SeedTopics(1, string(set.Changelog)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	brokers := cluster.ListenAddrs()
	kc, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	ctx := timeout(t, 30*time.Second)

	// A user whose key is in changelog partition 1 once it has 2.
	var user uint64
	for kafkaPartition(strconv.FormatUint(user, 10), 2) != 1 {
		user++
	}
	write := func(part int32, rec topics.MemberRecord) {
		t.Helper()
		r := &kgo.Record{Topic: string(set.Changelog), Partition: part, Key: topics.AppendUserID(nil, rec.UserID),
			Value: topics.AppendMemberRecord(nil, rec)}
		if err := kc.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	at := uint64(1764633600000000000)
	left := func(parts int32, offset int64, ep []topics.Episode) topics.MemberRecord {
		return topics.MemberRecord{UserID: user, Status: "left", LeftAtNs: &at, History: ep,
			Command: &topics.CommandRef{Op: "leave", AtNs: at, Topic: string(set.Commands), Partitions: parts, Partition: 1, Offset: offset, Changed: true}}
	}
	active := func(parts int32, offset int64) topics.MemberRecord {
		return topics.MemberRecord{UserID: user, Status: "active", History: []topics.Episode{{LeftAtNs: at, RejoinedAtNs: at + 1}},
			Command: &topics.CommandRef{Op: "rejoin", AtNs: at + 1, Topic: string(set.Commands), Partitions: parts, Partition: 1, Offset: offset, Changed: true}}
	}
	// Under 1 changelog partition: the leave, then another user's record.
	write(0, left(2, 10, nil))
	write(0, topics.MemberRecord{UserID: user + 1, Status: "active"})
	resp, err := kadm.NewClient(kc).CreatePartitions(ctx, 1, string(set.Changelog))
	if err != nil || resp[string(set.Changelog)].Err != nil {
		t.Fatalf("growing the changelog: %v %v", err, resp)
	}
	// A new producer: the old one's metadata knows 1 partition.
	if kc, err = kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner())); err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	// Grown: the rejoin lands in the key's partition, the leave after it
	// in partition 0, and a record that names no command after that.
	write(1, active(2, 11))
	write(0, left(2, 12, []topics.Episode{{LeftAtNs: at, RejoinedAtNs: at + 1}}))
	noCommand := left(2, 12, []topics.Episode{{LeftAtNs: at, RejoinedAtNs: at + 1}})
	noCommand.Command = nil
	noCommand.HistoryOmitted = 1
	write(0, noCommand)
	// And an older record read last: it must not win.
	write(1, active(2, 11))

	c := newClient(t, client.Brokers(brokers...))
	rec, err := c.Status(ctx, user)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Status != "left" || rec.Command != nil || rec.HistoryOmitted != 1 || len(rec.History) != 1 {
		t.Fatalf("Status = %s; want the record after the leave at offset 12, in changelog partition 0", asJSON(rec))
	}
}

// TestStatusOrder: a user's records compare by the command they follow,
// whatever the partition count in which, or order in which, they are read.
func TestStatusOrder(t *testing.T) {
	set := topics.Defaults()
	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(3, string(set.Commands), string(set.Changelog), string(set.DLQ)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	kc, err := kgo.NewClient(kgo.SeedBrokers(cluster.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	ctx := timeout(t, 30*time.Second)
	const user = 5
	for _, w := range []struct {
		part      int32
		parts     int32
		offset    int64
		requestID string
	}{
		{2, 3, 4, "latest"}, // under the grown count
		{0, 2, 90, "older count, higher offset"},
		{1, 0, 1000, "a version without counts"},
		{2, 3, 3, "earlier offset, read after"},
	} {
		rec := topics.MemberRecord{UserID: user, Status: "active",
			Command: &topics.CommandRef{Op: "rejoin", Topic: string(set.Commands), Partitions: w.parts, Offset: w.offset, RequestID: w.requestID}}
		r := &kgo.Record{Topic: string(set.Changelog), Partition: w.part, Key: []byte("5"), Value: topics.AppendMemberRecord(nil, rec)}
		if err := kc.ProduceSync(ctx, r).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	c := newClient(t, client.Brokers(cluster.ListenAddrs()...))
	rec, err := c.Status(context.Background(), user)
	if err != nil || rec.Command == nil || rec.Command.RequestID != "latest" {
		t.Fatalf("Status = %s, %v; want the record following offset 4 under 3 partitions", asJSON(rec), err)
	}
}

// statusReaders counts the Kafka clients made for reading ("-status-N"
// or "-read-N"), and the most open at once, through franz-go's hooks.
func statusReaders(r *openReaders) func(string) []kgo.Hook {
	return func(id string) []kgo.Hook {
		if !strings.Contains(id, "-status-") && !strings.Contains(id, "-read-") {
			return nil
		}
		return []kgo.Hook{readerHook{r}}
	}
}

// TestStatusReadersBounded: many Status calls, at once and one after
// another, share the client's readers — at most Scans of them, kept
// between calls — instead of a Kafka client each, and each answers its
// own user.
func TestStatusReadersBounded(t *testing.T) {
	brokers := processor(t)
	var readers openReaders
	c := newClient(t, client.Brokers(brokers...), client.Scans(2), client.KafkaHooks(statusReaders(&readers)))
	ctx := timeout(t, 60*time.Second)
	const users = 8
	for i := range users {
		p, err := c.Leave(ctx, uint64(9100+i))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.WaitReceipt(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	const calls = 40
	var wg sync.WaitGroup
	errs := make(chan error, calls)
	for i := range calls {
		wg.Add(1)
		go func() {
			defer wg.Done()
			user := uint64(9100 + i%(users+1)) // the last one never left
			rec, err := c.Status(ctx, user)
			switch {
			case err != nil:
				errs <- err
			case rec.UserID != user || (rec.Status == "left") != (user < 9100+users):
				errs <- fmt.Errorf("status of %d: %s", user, asJSON(rec))
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for i := range users {
		if rec, err := c.Status(ctx, uint64(9100+i)); err != nil || rec.Status != "left" {
			t.Fatalf("status of %d after the others: %s, %v", 9100+i, asJSON(rec), err)
		}
	}
	readers.mu.Lock()
	made, most := readers.made, readers.most
	readers.mu.Unlock()
	t.Logf("%d Status calls: %d readers made, at most %d open at once", calls+users, made, most)
	if made > 2 || most > 2 {
		t.Errorf("%d Status calls made %d readers, %d open at once; want at most Scans(2), kept between calls", calls+users, made, most)
	}
	c.Close()
	readers.mu.Lock()
	defer readers.mu.Unlock()
	if readers.open != 0 {
		t.Errorf("%d readers open after Close", readers.open)
	}
}

// TestStatusReaderAfterDeadline: a Status call that ends by its context
// gives back no reader in an unknown state: the next calls answer right,
// on at most Scans readers open, and none is left open after Close.
func TestStatusReaderAfterDeadline(t *testing.T) {
	brokers := processor(t)
	var readers openReaders
	c := newClient(t, client.Brokers(brokers...), client.Scans(1), client.KafkaHooks(statusReaders(&readers)))
	ctx := timeout(t, 60*time.Second)
	p, err := c.Leave(ctx, 9200)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitReceipt(ctx, p); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		short, cancel := context.WithTimeout(ctx, time.Millisecond)
		if _, err := c.Status(short, 9200); err == nil {
			t.Logf("call %d answered within 1ms", i)
		}
		cancel()
		rec, err := c.Status(ctx, 9200)
		if err != nil || rec.Status != "left" {
			t.Fatalf("status after a call cut short: %s, %v", asJSON(rec), err)
		}
	}
	readers.mu.Lock()
	most := readers.most
	readers.mu.Unlock()
	if most > 1 {
		t.Errorf("%d readers open at once, want at most Scans(1)", most)
	}
	c.Close()
	readers.mu.Lock()
	defer readers.mu.Unlock()
	if readers.open != 0 {
		t.Errorf("%d readers open after Close", readers.open)
	}
}
