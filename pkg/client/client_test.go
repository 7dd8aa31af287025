package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/pkg/client"
	"github.com/cohortgate/cohortgate/pkg/fanout"
	"github.com/cohortgate/cohortgate/pkg/kafkasec"
	"github.com/cohortgate/cohortgate/topics"
)

// murmur2 is Kafka's default partitioner hash, written from the Java
// client's Utils.murmur2 and shared with no code under test.
func murmur2(data []byte) int32 {
	const seed, m, r = uint32(0x9747b28c), uint32(0x5bd1e995), 24
	h := seed ^ uint32(len(data))
	n := len(data) / 4
	for i := range n {
		k := uint32(data[4*i]) | uint32(data[4*i+1])<<8 | uint32(data[4*i+2])<<16 | uint32(data[4*i+3])<<24
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
	}
	tail := data[4*n:]
	switch len(tail) {
	case 3:
		h ^= uint32(tail[2]) << 16
		fallthrough
	case 2:
		h ^= uint32(tail[1]) << 8
		fallthrough
	case 1:
		h ^= uint32(tail[0])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return int32(h)
}

// kafkaPartition is Java's DefaultPartitioner for a keyed record.
func kafkaPartition(key string, n int32) int32 { return (murmur2([]byte(key)) & 0x7fffffff) % n }

// bareCluster is a broker with the topics and no processor.
func bareCluster(t *testing.T) []string {
	t.Helper()
	set := topics.Defaults()
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.SeedTopics(partitions,
		string(set.Commands), string(set.Changelog), string(set.DLQ)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.ListenAddrs()
}

func processor(t *testing.T) []string {
	t.Helper()
	brokers, stop, err := cohortgate()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	return brokers
}

func newClient(t *testing.T, opts ...client.Opt) *client.Client {
	t.Helper()
	c, err := client.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

func timeout(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// readBack returns the record at p's partition and offset.
func readBack(t *testing.T, brokers []string, p client.Published) *kgo.Record {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{
		string(p.Topic): {p.Partition: kgo.NewOffset().At(p.Offset)},
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx := timeout(t, 10*time.Second)
	for ctx.Err() == nil {
		var got *kgo.Record
		cl.PollFetches(ctx).EachRecord(func(r *kgo.Record) {
			if got == nil && r.Offset == p.Offset {
				got = r
			}
		})
		if got != nil {
			return got
		}
	}
	t.Fatalf("no record at %s partition %d offset %d", p.Topic, p.Partition, p.Offset)
	return nil
}

func TestNewValidates(t *testing.T) {
	kc, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1"))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	bad := topics.Defaults()
	bad.Changelog = "no spaces"
	for _, tc := range []struct {
		name string
		opts []client.Opt
		want []string // each on a line of the error
	}{
		{"nothing", nil, []string{"no brokers"}},
		{"broker without port", []client.Opt{client.Brokers("kafka")}, []string{`broker "kafka" is not host:port`}},
		{"brokers and a client", []client.Opt{client.Brokers("k:9092"), client.KafkaClient(kc)}, []string{"both Brokers and KafkaClient"}},
		{"security and a client", []client.Opt{client.KafkaClient(kc), client.Security(kafkasec.Config{TLS: true})}, []string{"both Security and KafkaClient"}},
		{"security without a user", []client.Opt{client.Brokers("k:9092"), client.Security(kafkasec.Config{Mechanism: kafkasec.ScramSHA512, Password: "p"})},
			[]string{"--kafka-sasl-user"}},
		{"bad topic and nil clock", []client.Opt{client.Brokers("k:9092"), client.Topics(bad), client.Clock(nil)},
			[]string{`topic "no spaces"`, "Clock: nil"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := client.New(tc.opts...)
			if err == nil {
				c.Close()
				t.Fatal("New accepted it")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not say %q:\n%v", w, err)
				}
			}
			if n := len(strings.Split(err.Error(), "\n")); n != len(tc.want) {
				t.Errorf("%d lines for %d problems:\n%v", n, len(tc.want), err)
			}
		})
	}
	c, err := client.New(client.Brokers("k:9092"), client.Security(kafkasec.Config{}))
	if err != nil {
		t.Fatalf("a zero Security (plaintext, default check timeout) refused: %v", err)
	}
	c.Close()
}

// TestLeaveRecord: the record on the commands topic has the key, the
// partition, the JSON and the timestamp the contract asks for.
func TestLeaveRecord(t *testing.T) {
	brokers := bareCluster(t)
	stamp := time.Date(2026, 12, 1, 0, 0, 0, 123_456_789, time.UTC)
	c := newClient(t, client.Brokers(brokers...), client.Clock(func() time.Time { return stamp }))
	ctx := timeout(t, 10*time.Second)
	at := stamp.Add(-time.Hour + 7)
	for _, tc := range []struct {
		name string
		user uint64
		op   string
		opts []client.CommandOpt
		want string // the value; "*" stands for the generated request id
	}{
		{"default", 42, "leave", nil, `{"op":"leave","user_id":42,"request_id":"*"}`},
		{"request id and boundary", 18446744073709551615, "leave", []client.CommandOpt{client.RequestID(`r "1"`), client.At(at)},
			`{"op":"leave","user_id":18446744073709551615,"at_ns":` + strconv.FormatInt(at.UnixNano(), 10) + `,"request_id":"r \"1\""}`},
		{"rejoin", 0, "rejoin", []client.CommandOpt{client.RequestID("x")}, `{"op":"rejoin","user_id":0,"request_id":"x"}`},
		{"intent", 9, "leave", []client.CommandOpt{client.Intent("job-1", at)},
			`{"op":"leave","user_id":9,"at_ns":` + strconv.FormatInt(at.UnixNano(), 10) + `,"request_id":"job-1"}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			publish := c.Leave
			if tc.op == "rejoin" {
				publish = c.Rejoin
			}
			p, err := publish(ctx, tc.user, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			r := readBack(t, brokers, p)
			key := strconv.FormatUint(tc.user, 10)
			if string(r.Key) != key {
				t.Errorf("key %q, want %q", r.Key, key)
			}
			if want := kafkaPartition(key, partitions); r.Partition != want {
				t.Errorf("partition %d, want murmur2's %d", r.Partition, want)
			}
			want := strings.Replace(tc.want, "*", p.Command.RequestID, 1)
			if string(r.Value) != want {
				t.Errorf("value %s\nwant  %s", r.Value, want)
			}
			if !r.Timestamp.Equal(stamp.Truncate(time.Millisecond)) || !p.Timestamp.Equal(r.Timestamp) {
				t.Errorf("record timestamp %v, Published %v; want the clock's %v in ms", r.Timestamp, p.Timestamp, stamp)
			}
			cmd, err := topics.DecodeCommand(r.Key, r.Value)
			if err != nil || cmd != p.Command {
				t.Errorf("record decodes to %+v, %v; Published says %+v", cmd, err, p.Command)
			}
		})
	}
}

func TestRequestIDs(t *testing.T) {
	brokers := bareCluster(t)
	c := newClient(t, client.Brokers(brokers...))
	ctx := timeout(t, 10*time.Second)
	seen := make(map[string]bool)
	for range 20 {
		p, err := c.Leave(ctx, 1)
		if err != nil {
			t.Fatal(err)
		}
		id := p.Command.RequestID
		if id == "" || seen[id] || len(id) < 16 {
			t.Fatalf("request id %q: empty, short or seen before", id)
		}
		seen[id] = true
	}
	if _, err := c.Leave(ctx, 1, client.RequestID(strings.Repeat("x", topics.MaxRequestIDBytes+1))); !errors.Is(err, topics.ErrCommandRequestID) {
		t.Errorf("an over-long request id: %v, want ErrCommandRequestID", err)
	}
}

// TestBoundaryRefused: boundaries the processor would dead-letter are not
// published.
func TestBoundaryRefused(t *testing.T) {
	brokers := bareCluster(t)
	now := time.Now()
	c := newClient(t, client.Brokers(brokers...), client.Clock(func() time.Time { return now }))
	ctx := timeout(t, 10*time.Second)
	if client.MaxAhead != fanout.DefaultMaxFutureSkew {
		t.Errorf("MaxAhead %v, the processor's default skew %v", client.MaxAhead, fanout.DefaultMaxFutureSkew)
	}
	for _, tc := range []struct {
		name string
		at   time.Time
		want string
	}{
		{"ahead", now.Add(client.MaxAhead + time.Millisecond), "command_future_skew"},
		{"before the epoch", time.Unix(0, -1), "command_at_out_of_range"},
		{"after 2262", time.Date(2263, 1, 1, 0, 0, 0, 0, time.UTC), "command_at_out_of_range"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := c.Leave(ctx, 5, client.At(tc.at))
			if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "leave of user 5") {
				t.Errorf("Leave(At %v) = %v, want an error naming the user and %s", tc.at, err, tc.want)
			}
		})
	}
	for _, bad := range []client.CommandOpt{client.Intent("", now), client.Intent("k", time.Time{})} {
		if _, err := c.Leave(ctx, 5, bad); err == nil || !strings.Contains(err.Error(), "Intent") {
			t.Errorf("Leave with an Intent without a key or a time = %v, want an error naming Intent", err)
		}
	}
	// The record timestamp is the clock in ms: the bound is from there.
	if _, err := c.Leave(ctx, 5, client.At(now.Truncate(time.Millisecond).Add(client.MaxAhead))); err != nil {
		t.Errorf("a boundary exactly MaxAhead ahead: %v", err)
	}
}

// TestMisrouted: a caller's client whose partitioner does not hash keys
// gets the record's position and an error that says why.
func TestMisrouted(t *testing.T) {
	brokers := bareCluster(t)
	kc, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	c := newClient(t, client.KafkaClient(kc))
	user := uint64(42) // its partition is not 0, where the manual partitioner sends everything
	want := kafkaPartition("42", partitions)
	if want == 0 {
		t.Fatal("pick a user whose partition is not 0")
	}
	p, err := c.Leave(timeout(t, 10*time.Second), user)
	var mis *client.MisroutedError
	if !errors.As(err, &mis) || mis.Want != want || p.Partition != 0 || mis.Published != p {
		t.Fatalf("Leave = %+v, %v; want a MisroutedError wanting partition %d", p, err, want)
	}
	if !strings.Contains(err.Error(), "StickyKeyPartitioner") {
		t.Errorf("error does not say what to use: %v", err)
	}
}

// TestReceipts against a running processor: a receipt per command, a
// duplicate recognised, a refusal reported, and Status as the changelog
// says.
func TestReceipts(t *testing.T) {
	brokers := processor(t)
	c := newClient(t, client.Brokers(brokers...))
	ctx := timeout(t, 60*time.Second)
	const user = 77

	if rec, err := c.Status(ctx, user); err != nil || rec.Status != "active" || rec.Command != nil || rec.History == nil {
		t.Fatalf("Status of an unknown user = %+v, %v; want active, no command, empty history", rec, err)
	}
	at := time.Now().Add(-time.Minute)
	leave, err := c.Leave(ctx, user, client.At(at), client.RequestID("first"))
	if err != nil {
		t.Fatal(err)
	}
	rec, err := c.WaitReceipt(ctx, leave)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Status != "left" || *rec.LeftAtNs != uint64(at.UnixNano()) || rec.Command.RequestID != "first" ||
		!rec.Command.Changed || rec.Command.Offset != leave.Offset || rec.Command.Partition != leave.Partition || rec.Receipt == nil {
		t.Fatalf("receipt of the leave: %s", asJSON(rec))
	}

	again, err := c.Leave(ctx, user, client.At(at), client.RequestID("first"))
	if err != nil {
		t.Fatal(err)
	}
	if rec, err := c.WaitReceipt(ctx, again); err != nil || !rec.Command.Duplicate || rec.Command.Offset != again.Offset {
		t.Fatalf("receipt of the same leave again: %s, %v; want duplicate at offset %d", asJSON(rec), err, again.Offset)
	}

	early, err := c.Rejoin(ctx, user, client.At(at.Add(-time.Second)))
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.WaitReceipt(ctx, early)
	var refused *client.RefusedError
	if !errors.As(err, &refused) || !errors.Is(err, topics.ErrRejoinBeforeLeave) || refused.Published != early {
		t.Fatalf("a rejoin before the leave: %v, want a RefusedError rejoin_before_leave", err)
	}

	back, err := c.Rejoin(ctx, user)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitReceipt(ctx, back); err != nil {
		t.Fatal(err)
	}
	rec, err = c.Status(ctx, user)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Status != "active" || len(rec.History) != 1 || rec.History[0].RejoinedAtNs != back.BoundaryNs() ||
		rec.Command.RequestID != back.Command.RequestID {
		t.Fatalf("Status after the rejoin: %s", asJSON(rec))
	}
}

// TestWaitReceiptDeadline: with no processor, the wait ends at the
// context's deadline and says what it waited for.
func TestWaitReceiptDeadline(t *testing.T) {
	brokers := bareCluster(t)
	c := newClient(t, client.Brokers(brokers...))
	p, err := c.Leave(timeout(t, 10*time.Second), 3, client.RequestID("nobody-listens"))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err = c.WaitReceipt(ctx, p)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "nobody-listens") {
		t.Fatalf("WaitReceipt = %v, want the deadline and the request id", err)
	}
	if _, err := c.WaitReceipt(ctx, client.Published{Timestamp: time.Now()}); err == nil || !strings.Contains(err.Error(), "position") {
		t.Errorf("WaitReceipt without a position = %v", err)
	}
}

// TestCallersGroupClient: a caller's client that consumes in a group
// still publishes and reads receipts, and stays open after Close.
func TestCallersGroupClient(t *testing.T) {
	brokers := processor(t)
	kc, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ConsumerGroup("callers-group"), kgo.ConsumeTopics("engagement.signals"))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	c, err := client.New(client.KafkaClient(kc))
	if err != nil {
		t.Fatal(err)
	}
	ctx := timeout(t, 30*time.Second)
	p, err := c.Leave(ctx, 12)
	if err != nil {
		t.Fatal(err)
	}
	if rec, err := c.WaitReceipt(ctx, p); err != nil || rec.Status != "left" {
		t.Fatalf("receipt %+v, %v", rec, err)
	}
	c.Close()
	if err := kc.Ping(ctx); err != nil {
		t.Errorf("the caller's client no longer works after Close: %v", err)
	}
}

func asJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// TestReceiptIsTheCommands: a receipt answers the exact command waited
// for, never an earlier one with the same request id. Leave, rejoin and
// leave again with one request id, all stamped in the same millisecond:
// the last leave's receipt is the record that names its own offset, and
// says what the processor made of it, whatever that was.
func TestReceiptIsTheCommands(t *testing.T) {
	brokers := processor(t)
	stamp := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	c := newClient(t, client.Brokers(brokers...), client.Clock(func() time.Time { return stamp }))
	ctx := timeout(t, 60*time.Second)
	const user = 91
	var sent []client.Published
	for _, publish := range []func(context.Context, uint64, ...client.CommandOpt) (client.Published, error){c.Leave, c.Rejoin, c.Leave} {
		p, err := publish(ctx, user, client.RequestID("unsubscribe-91"))
		if err != nil {
			t.Fatal(err)
		}
		sent = append(sent, p)
	}
	for i, p := range sent {
		rec, err := c.WaitReceipt(ctx, p)
		if err != nil {
			t.Fatalf("command %d: %v", i, err)
		}
		if rec.Command == nil || rec.Command.Partition != p.Partition || rec.Command.Offset != p.Offset || rec.Command.Op != p.Command.Op.String() {
			t.Fatalf("command %d (%s at offset %d): the receipt follows another command: %s", i, p.Command.Op, p.Offset, asJSON(rec))
		}
		// The record is reported as the processor wrote it: a restated
		// state is a duplicate that changed nothing.
		if rec.Command.Duplicate && rec.Command.Changed {
			t.Errorf("command %d: a duplicate that changed the state: %s", i, asJSON(rec))
		}
	}
}

// TestMisroutedReceipt: a command Kafka put in the wrong partition is
// answered through the copy the processor re-publishes to its key's
// partition.
func TestMisroutedReceipt(t *testing.T) {
	brokers := processor(t)
	kc, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	c := newClient(t, client.KafkaClient(kc))
	ctx := timeout(t, 60*time.Second)
	p, err := c.Leave(ctx, 42) // user 42 belongs in partition 4; the manual partitioner puts it in 0
	var mis *client.MisroutedError
	if !errors.As(err, &mis) {
		t.Fatalf("Leave = %v, want a MisroutedError", err)
	}
	rec, err := c.WaitReceipt(ctx, p)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Status != "left" || rec.Command.Partition != mis.Want || rec.Command.RequestID != p.Command.RequestID {
		t.Fatalf("receipt of a misrouted leave: %s; want it left, following the copy in partition %d", asJSON(rec), mis.Want)
	}
}
