package integration

import (
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.yaml.in/yaml/v3"

	"github.com/cohortgate/cohortgate/pkg/client"
	"github.com/cohortgate/cohortgate/topics"
)

// contractDoc is the AsyncAPI document of the topics; topics/asyncapi_test.go
// checks it against the code, this file against what a processor writes.
const contractDoc = "../topics/asyncapi.yaml"

// contractSchemas compiles the named schemas of components.schemas.
func contractSchemas(t *testing.T, names ...string) map[string]*jsonschema.Schema {
	t.Helper()
	raw, err := os.ReadFile(contractDoc)
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("%s: %v", contractDoc, err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft7)
	if err := c.AddResource(contractDoc, doc); err != nil {
		t.Fatal(err)
	}
	out := make(map[string]*jsonschema.Schema)
	for _, n := range names {
		if out[n], err = c.Compile(contractDoc + "#/components/schemas/" + n); err != nil {
			t.Fatalf("%s: schema %s: %v", contractDoc, n, err)
		}
	}
	return out
}

// validateJSON validates a record value against s, numbers read exactly.
func validateJSON(s *jsonschema.Schema, value []byte) error {
	v, err := jsonschema.UnmarshalJSON(strings.NewReader(string(value)))
	if err != nil {
		return err
	}
	return s.Validate(v)
}

// headerMap is a record's headers as the header schemas see them.
func headerMap(r *kgo.Record) map[string]any {
	m := make(map[string]any, len(r.Headers))
	for _, h := range r.Headers {
		m[h.Key] = string(h.Value)
	}
	return m
}

// TestContractRecords: every record a running processor writes — the
// changelog after leaves, a duplicate, a rejoin and a late leave; the DLQ
// after a bad key, bad JSON, a refused rejoin and a record too large; a
// re-published command and signal — validates against the schemas of
// topics/asyncapi.yaml, and carries no cohortgate.* header the document
// does not list. The commands go through pkg/client.
func TestContractRecords(t *testing.T) {
	s := contractSchemas(t, "Command", "MemberRecord", "UserIDKey", "DeadLetterHeaders", "RepublishedHeaders")
	e := newEnv(t, 2)
	e.limitCohort(2000)
	pr := e.start(t.TempDir(), e.config())
	pr.waitReady(t, 2)
	c, err := client.New(client.Brokers(broker.addrs...), client.Topics(e.set))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := e.ctx(90 * time.Second)
	manual, err := kgo.NewClient(kgo.SeedBrokers(broker.addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer manual.Close()

	var inPart [2][]uint64 // users of partition 0 and 1
	for u := uint64(1); len(inPart[0]) < 4 || len(inPart[1]) < 2; u++ {
		p := murmur2Partition(topics.AppendUserID(nil, u), 2)
		inPart[p] = append(inPart[p], u)
	}
	u, other := inPart[0], inPart[1][0]
	now := time.Now()
	wait := func(p client.Published, err error) {
		t.Helper()
		if err == nil {
			_, err = c.WaitReceipt(ctx, p)
		}
		if err != nil {
			t.Fatal(err)
		}
	}

	// A leave, the same leave again (a duplicate), a rejoin.
	leave, err := c.Leave(ctx, u[0], client.At(now.Add(-10*time.Second)), client.RequestID("contract-1"))
	wait(leave, err)
	wait(c.Leave(ctx, u[0], client.At(now.Add(-10*time.Second)), client.RequestID("contract-1")))
	wait(c.Rejoin(ctx, u[0]))
	// A late leave: a signal of u[1] is forwarded, then u[1] leaves before it.
	e.signal(u[1], now.Add(-5*time.Second), "forwarded-before-the-leave")
	e.waitDecided()
	wait(c.Leave(ctx, u[1], client.At(now.Add(-6*time.Second))))
	// A rejoin before the leave, refused.
	wait(c.Leave(ctx, u[2], client.At(now)))
	early, err := c.Rejoin(ctx, u[2], client.At(now.Add(-time.Hour)))
	if err == nil {
		_, err = c.WaitReceipt(ctx, early)
	}
	if !errors.Is(err, topics.ErrRejoinBeforeLeave) {
		t.Fatalf("a rejoin before the leave: %v, want it refused", err)
	}
	// Records of other producers: a bad key, bad JSON, a command and a
	// signal on the wrong partition, a signal too large for the cohort topic.
	otherKey := topics.AppendUserID(nil, other)
	if err := manual.ProduceSync(ctx,
		&kgo.Record{Topic: string(e.set.Commands), Partition: 0, Key: []byte("007"), Value: []byte(`{"op":"leave","user_id":7}`)},
		&kgo.Record{Topic: string(e.set.Commands), Partition: 0, Key: topics.AppendUserID(nil, u[3]), Value: []byte(`{"op":`)},
		&kgo.Record{Topic: string(e.set.Commands), Partition: 0, Key: otherKey, Value: []byte(`{"op":"leave","user_id":` + string(otherKey) + `}`)},
		&kgo.Record{Topic: string(e.set.Signals), Partition: 0, Key: topics.AppendUserID(nil, inPart[1][1]), Value: []byte("misrouted-signal"), Timestamp: time.Now()},
		&kgo.Record{Topic: string(e.set.Signals), Partition: 0, Key: topics.AppendUserID(nil, u[3]), Value: make([]byte, 5000), Timestamp: time.Now()},
	).FirstErr(); err != nil {
		t.Fatal(err)
	}
	e.waitDecided()

	var dlq []*kgo.Record
	reasons := make(map[string]bool)
	eventually(t, 60*time.Second, func() error {
		dlq = e.readAll(e.set.DLQ)
		clear(reasons)
		for _, r := range dlq {
			reasons[header(r, topics.HeaderReason)] = true
		}
		for _, want := range []topics.Reason{topics.ReasonKeyLeadingZero, topics.ReasonCommandJSON, topics.ReasonRejoinBeforeLeave, topics.ReasonRecordTooLarge} {
			if !reasons[string(want)] {
				return errors.New("no DLQ record of reason " + string(want) + " yet")
			}
		}
		if m, err := pr.Member(other); err != nil || m.Status != "left" {
			return errors.New("the misrouted leave is not applied yet")
		}
		if !hasValue(e.readAll(e.set.Cohort), "misrouted-signal") {
			return errors.New("the misrouted signal is not forwarded yet")
		}
		return nil
	})
	documented := func(r *kgo.Record) {
		t.Helper()
		for _, h := range r.Headers {
			if strings.HasPrefix(h.Key, "cohortgate.") && !slices.Contains(topics.Headers(), h.Key) {
				t.Errorf("%s partition %d offset %d: header %s is not in topics.Headers() nor the document", r.Topic, r.Partition, r.Offset, h.Key)
			}
		}
	}
	for _, r := range dlq {
		documented(r)
		if err := s["DeadLetterHeaders"].Validate(headerMap(r)); err != nil {
			t.Errorf("DLQ record of reason %s: headers %v: %v", header(r, topics.HeaderReason), headerMap(r), err)
		}
	}
	if !reasons[string(topics.ReasonRecordTooLarge)] || header(findTooLarge(dlq), topics.HeaderOriginalSHA256) == "" {
		t.Error("no truncated DLQ copy with cohortgate.original.* headers to check")
	}

	var duplicate, late, history, changelog bool
	for _, r := range e.readAll(e.set.Changelog) {
		changelog = true
		if err := s["UserIDKey"].Validate(string(r.Key)); err != nil {
			t.Errorf("changelog key %q: %v", r.Key, err)
		}
		if err := validateJSON(s["MemberRecord"], r.Value); err != nil {
			t.Errorf("changelog record %s: %v", r.Value, err)
		}
		rec, err := topics.DecodeMemberRecord(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		duplicate = duplicate || (rec.Command != nil && rec.Command.Duplicate)
		late = late || (len(rec.LateLeaves) > 0 && rec.LateLeaves[0].Exact)
		history = history || len(rec.History) > 0
	}
	if !changelog || !duplicate || !late || !history {
		t.Errorf("the changelog lacks a case to check: records %v, a duplicate %v, an exact late leave %v, history %v", changelog, duplicate, late, history)
	}
	for _, user := range []uint64{u[0], u[1]} {
		m, err := pr.Member(user)
		if err != nil {
			t.Fatal(err)
		}
		if err := validateJSON(s["MemberRecord"], topics.AppendMemberRecord(nil, m)); err != nil {
			t.Errorf("GET /v1/members/%d answers %+v: %v", user, m, err)
		}
	}

	republished := 0
	for _, topic := range []topics.Topic{e.set.Commands, e.set.Signals, e.set.Cohort} {
		for _, r := range e.readAll(topic) {
			documented(r)
			if err := s["RepublishedHeaders"].Validate(headerMap(r)); err != nil {
				t.Errorf("%s record headers %v: %v", topic, headerMap(r), err)
			}
			if header(r, topics.HeaderMisroutedFrom) != "" {
				republished++
			}
			if _, err := topics.DecodeCommand(r.Key, r.Value); topic == e.set.Commands && err == nil {
				if err := validateJSON(s["Command"], r.Value); err != nil {
					t.Errorf("command %s, which the processor applies: %v", r.Value, err)
				}
			}
		}
	}
	if republished != 3 {
		t.Errorf("%d records carry %s, want 3: the re-published command and signal, and the forwarded signal", republished, topics.HeaderMisroutedFrom)
	}
}

func findTooLarge(dlq []*kgo.Record) *kgo.Record {
	for _, r := range dlq {
		if header(r, topics.HeaderReason) == string(topics.ReasonRecordTooLarge) {
			return r
		}
	}
	return nil
}
