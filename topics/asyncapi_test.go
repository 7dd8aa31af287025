package topics_test

import (
	"bytes"
	"encoding/json"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"go.yaml.in/yaml/v3"

	"github.com/cohortgate/cohortgate/topics"
)

// The contract document, and the AsyncAPI 3.0.0 JSON Schema it must follow
// (schemas/3.0.0-without-$id.json of the npm package @asyncapi/specs
// 6.11.1, Apache-2.0, kept as it was published).
const (
	asyncAPIDoc    = "asyncapi.yaml"
	asyncAPISchema = "testdata/asyncapi-3.0.0.schema.json"
)

// contract is asyncapi.yaml, decoded as JSON Schema sees it.
type contract struct {
	doc map[string]any
	c   *jsonschema.Compiler
}

func loadContract(t *testing.T) *contract {
	t.Helper()
	raw, err := os.ReadFile(asyncAPIDoc)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("%s: %v", asyncAPIDoc, err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft7) // AsyncAPI schemas are draft-07
	if err := c.AddResource(asyncAPIDoc, doc); err != nil {
		t.Fatalf("%s: %v", asyncAPIDoc, err)
	}
	return &contract{doc: doc, c: c}
}

// schema compiles components.schemas.<name>.
func (k *contract) schema(t *testing.T, name string) *jsonschema.Schema {
	t.Helper()
	s, err := k.c.Compile(asyncAPIDoc + "#/components/schemas/" + name)
	if err != nil {
		t.Fatalf("schema %s: %v", name, err)
	}
	return s
}

// at returns the value at a path of map keys in the document, or nil.
func (k *contract) at(path ...string) any {
	var v any = k.doc
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[p]
	}
	return v
}

// instance decodes JSON exactly as the validator needs it: numbers as
// json.Number, so 2^64-1 stays 2^64-1.
func instance(t *testing.T, where, text string) any {
	t.Helper()
	v, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
	if err != nil {
		t.Fatalf("%s: %v: %s", where, err, text)
	}
	return v
}

// TestAsyncAPIDocument: the document is AsyncAPI 3.0.0 by the spec's own
// JSON Schema, and names the five default topics.
func TestAsyncAPIDocument(t *testing.T) {
	k := loadContract(t)
	// Through JSON, so that the document's numbers are what a JSON reader sees.
	asJSON, err := json.Marshal(k.doc)
	if err != nil {
		t.Fatal(err)
	}
	spec, err := jsonschema.NewCompiler().Compile(asyncAPISchema)
	if err != nil {
		t.Fatal(err)
	}
	if err := spec.Validate(instance(t, asyncAPIDoc, string(asJSON))); err != nil {
		t.Errorf("%s is not valid AsyncAPI 3.0.0:\n%v", asyncAPIDoc, err)
	}

	d := topics.Defaults()
	want := map[string]topics.Topic{"commands": d.Commands, "signals": d.Signals, "cohort": d.Cohort, "dlq": d.DLQ, "changelog": d.Changelog}
	channels, _ := k.at("channels").(map[string]any)
	if len(channels) != len(want) {
		t.Errorf("%d channels, want the %d topics", len(channels), len(want))
	}
	for ch, topic := range want {
		if got := k.at("channels", ch, "address"); got != string(topic) {
			t.Errorf("channel %s has address %v, want %s", ch, got, topic)
		}
	}
	// The topic configs the document states are those the processor
	// creates the topics with.
	for _, s := range d.Specs() {
		ch := strings.ToLower(s.Role)
		conf, _ := k.at("channels", ch, "bindings", "kafka", "topicConfiguration").(map[string]any)
		if len(conf) != len(s.Configs) {
			t.Errorf("channel %s states %d topic configs, the processor sets %d: %v", ch, len(conf), len(s.Configs), s.Configs)
		}
		for name, value := range s.Configs {
			got := conf[name]
			if list, ok := got.([]any); ok && len(list) == 1 {
				got = list[0] // cleanup.policy is a list in the binding
			}
			if b, _ := json.Marshal(got); strings.Trim(string(b), `"`) != value {
				t.Errorf("channel %s: %s is %v in the document, %s in topics.Specs", ch, name, got, value)
			}
		}
	}
}

// TestAsyncAPIReasons: the document lists exactly the reasons of
// topics.Reasons, so a reason added in code fails here until it is
// documented.
func TestAsyncAPIReasons(t *testing.T) {
	k := loadContract(t)
	var documented []string
	alts, _ := k.at("components", "schemas", "Reason", "oneOf").([]any)
	for _, a := range alts {
		m, _ := a.(map[string]any)
		c, _ := m["const"].(string)
		if d, _ := m["description"].(string); c == "" || d == "" {
			t.Errorf("Reason alternative %v: want a const and a description", a)
		}
		documented = append(documented, c)
	}
	var code []string
	for _, r := range topics.Reasons() {
		code = append(code, string(r))
		if !slices.Contains(documented, string(r)) {
			t.Errorf("reason %s is in topics.Reasons() but not in %s components.schemas.Reason", r, asyncAPIDoc)
		}
	}
	for _, r := range documented {
		if !slices.Contains(code, r) {
			t.Errorf("reason %s is in %s but not in topics.Reasons()", r, asyncAPIDoc)
		}
	}
	reason := k.schema(t, "Reason")
	if err := reason.Validate("not_a_reason"); err == nil {
		t.Error("the Reason schema accepts not_a_reason")
	}
}

// TestAsyncAPIHeaders: every header the processor adds is documented on a
// message, so a header added in code fails here until it is.
func TestAsyncAPIHeaders(t *testing.T) {
	k := loadContract(t)
	documented := make(map[string][]string) // header → messages that carry it
	messages, _ := k.at("components", "messages").(map[string]any)
	for name := range messages {
		ref, _ := k.at("components", "messages", name, "headers", "$ref").(string)
		schema := strings.TrimPrefix(ref, "#/components/schemas/")
		props, _ := k.at("components", "schemas", schema, "properties").(map[string]any)
		for h := range props {
			documented[h] = append(documented[h], name)
		}
	}
	for _, h := range topics.Headers() {
		if len(documented[h]) == 0 {
			t.Errorf("header %s is in topics.Headers() but on no message of %s", h, asyncAPIDoc)
		}
		delete(documented, h)
	}
	for h, on := range documented {
		t.Errorf("header %s is documented (on %v) but not in topics.Headers()", h, on)
	}
	if on := k.at("components", "schemas", "DeadLetterHeaders", "properties", topics.HeaderReason, "$ref"); on != "#/components/schemas/Reason" {
		t.Errorf("%s is not a Reason: %v", topics.HeaderReason, on)
	}
}

// TestAsyncAPIGoldenRecords: the golden changelog records validate against
// MemberRecord; every command the decoder accepts validates against
// Command, and a command the schema accepts but the decoder refuses breaks
// one of the rules the schema's description says JSON Schema cannot state.
func TestAsyncAPIGoldenRecords(t *testing.T) {
	k := loadContract(t)
	member := k.schema(t, "MemberRecord")
	raw, err := os.ReadFile("testdata/changelog.golden")
	if err != nil {
		t.Fatal(err)
	}
	for i, line := range strings.Split(strings.TrimSpace(string(raw)), "\n") {
		if err := member.Validate(instance(t, "changelog.golden", line)); err != nil {
			t.Errorf("testdata/changelog.golden:%d: %v", i+1, err)
		}
	}
	for _, bad := range []string{
		`{"user_id":1,"status":"left","left_at_ns":null,"history":[],"late_leaves":[]}`,
		`{"user_id":1,"status":"active","left_at_ns":null,"history":[],"late_leaves":[{"left_at_ns":1,"forwarded_through_ns":2}]}`,
		`{"user_id":1,"status":"active","left_at_ns":null,"history":[],"late_leaves":[],"command":{"op":"leave","at_ns":1,"topic":"t","partition":0,"offset":0,"changed":false,"duplicate":false}}`,
		`{"user_id":18446744073709551616,"status":"active","left_at_ns":null,"history":[],"late_leaves":[]}`,
		`{"user_id":1,"status":"active","left_at_ns":null,"history":[],"late_leaves":[],"history_omitted":0}`,
	} {
		if err := member.Validate(instance(t, "a bad record", bad)); err == nil {
			t.Errorf("MemberRecord accepts %s", bad)
		}
	}

	command := k.schema(t, "Command")
	beyondSchema := []topics.Reason{ // see the Command schema's description
		topics.ReasonKeyEmpty, topics.ReasonKeyNotDecimal, topics.ReasonKeyLeadingZero, topics.ReasonKeyOverflow,
		topics.ReasonCommandUserMismatch, topics.ReasonCommandJSON, topics.ReasonCommandUserInvalid,
		topics.ReasonCommandAtNs, topics.ReasonCommandRequestID,
	}
	raw, err = os.ReadFile("testdata/commands.golden")
	if err != nil {
		t.Fatal(err)
	}
	var key string
	refused := 0
	for i, line := range strings.Split(string(raw), "\n") {
		where := "testdata/commands.golden:" + strconv.Itoa(i+1)
		switch {
		case strings.HasPrefix(line, "key: "):
			key = strings.TrimPrefix(line, "key: ")
		case strings.HasPrefix(line, "out: "):
			out := strings.TrimPrefix(line, "out: ")
			if err := command.Validate(instance(t, where, out)); err != nil {
				t.Errorf("%s: the canonical command %s: %v", where, out, err)
			}
		case strings.HasPrefix(line, "in:  "):
			in := strings.TrimPrefix(line, "in:  ")
			_, decodeErr := topics.DecodeCommand([]byte(key), []byte(in))
			v, jsonErr := jsonschema.UnmarshalJSON(bytes.NewReader([]byte(in)))
			if jsonErr != nil {
				if decodeErr == nil {
					t.Errorf("%s: the decoder takes %s, which is not JSON", where, in)
				}
				continue
			}
			schemaErr := command.Validate(v)
			switch {
			case decodeErr == nil && schemaErr != nil:
				t.Errorf("%s: the decoder takes %s, the schema refuses it: %v", where, in, schemaErr)
			case decodeErr != nil && schemaErr == nil && !slices.Contains(beyondSchema, topics.ReasonOf(decodeErr)):
				t.Errorf("%s: the schema takes %s, the decoder refuses it (%v), and the schema could say why", where, in, decodeErr)
			case decodeErr != nil && schemaErr != nil:
				refused++
			}
		}
	}
	// An array, a wrong op, no user_id, user_id a string, at_ns below 0
	// and above 2^64-1, request_id a number: the refusals JSON Schema can
	// state, in the golden file today. More is fine; fewer means the
	// schema lost a rule.
	if refused < 7 {
		t.Errorf("the schema refused %d of the golden inputs the decoder refuses, want at least 7", refused)
	}
}
