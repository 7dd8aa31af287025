package topics

import (
	"errors"
	"reflect"
	"strings"
	"testing"
)

func TestTopicValidate(t *testing.T) {
	tests := []struct {
		name  string
		topic Topic
		rule  string // a fragment of the broken rule; "" when valid
	}{
		{name: "default commands", topic: Commands},
		{name: "every allowed byte", topic: "azAZ09._-"},
		{name: "one byte", topic: "a"},
		{name: "dots inside", topic: "a..b"},
		{name: "dot prefix", topic: ".a"},
		{name: "triple dot", topic: "..."},
		{name: "internal-looking", topic: "__consumer_offsets"},
		{name: "249 bytes", topic: Topic(strings.Repeat("x", 249))},

		{name: "empty", topic: "", rule: "empty"},
		{name: "250 bytes", topic: Topic(strings.Repeat("x", 250)), rule: "250 bytes"},
		{name: "dot", topic: ".", rule: "reserved"},
		{name: "dot dot", topic: "..", rule: "reserved"},
		{name: "space", topic: "a b", rule: `' ' at byte 1`},
		{name: "slash", topic: "a/b", rule: `'/' at byte 1`},
		{name: "colon", topic: "a:b", rule: `':'`},
		{name: "plus", topic: "a+b", rule: `'+'`},
		{name: "non-ASCII", topic: "größe", rule: "byte 0xc3 at byte 2"},
		{name: "NUL", topic: "a\x00", rule: "byte 0x0 at byte 1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.topic.Validate()
			if tt.rule == "" {
				if err != nil {
					t.Fatalf("Topic(%q).Validate() = %v, want nil", tt.topic, err)
				}
				return
			}
			var te *TopicError
			if !errors.As(err, &te) {
				t.Fatalf("Topic(%q).Validate() = %v, want a *TopicError", tt.topic, err)
			}
			if te.Topic != tt.topic || te.Field != "" || !strings.Contains(te.Rule, tt.rule) {
				t.Errorf("Topic(%q).Validate() = %+v, want rule containing %q", tt.topic, te, tt.rule)
			}
			if !strings.HasPrefix(err.Error(), "topics: topic ") {
				t.Errorf("error text %q does not name the topic", err)
			}
		})
	}
}

func TestTopicErrorText(t *testing.T) {
	err := Topic("a b").Validate()
	const want = `topics: topic "a b" has ' ' at byte 1; Kafka allows only [a-zA-Z0-9._-]`
	if err.Error() != want {
		t.Errorf("got  %s\nwant %s", err, want)
	}
	s := Defaults()
	s.Cohort = s.Signals
	const wantSet = `topics: Cohort: topic "engagement.signals" is also Signals`
	if err := s.Validate(); err == nil || err.Error() != wantSet {
		t.Errorf("got  %v\nwant %s", err, wantSet)
	}
}

func TestSetValidate(t *testing.T) {
	with := func(f func(*Set)) Set {
		s := Defaults()
		f(&s)
		return s
	}
	tests := []struct {
		name  string
		set   Set
		field string // the field the error names; "" when valid
		rule  string
	}{
		{name: "defaults", set: Defaults()},
		{name: "prefixed", set: Set{Commands: "p.c", Signals: "p.s", Cohort: "p.co", DLQ: "p.d", Changelog: "p.cl"}},
		{name: "zero", set: Set{}, field: "Commands", rule: "empty"},
		{name: "bad Cohort", set: with(func(s *Set) { s.Cohort = "cohort signals" }), field: "Cohort", rule: "' '"},
		{name: "empty Changelog", set: with(func(s *Set) { s.Changelog = "" }), field: "Changelog", rule: "empty"},
		{name: "bad DLQ", set: with(func(s *Set) { s.DLQ = ".." }), field: "DLQ", rule: "reserved"},
		{name: "DLQ equals Commands", set: with(func(s *Set) { s.DLQ = s.Commands }), field: "DLQ", rule: "is also Commands"},
		{name: "Changelog equals Cohort", set: with(func(s *Set) { s.Changelog = s.Cohort }), field: "Changelog", rule: "is also Cohort"},
		{name: "Signals equals Commands", set: with(func(s *Set) { s.Signals = s.Commands }), field: "Signals", rule: "is also Commands"},
		{name: "dot and underscore collide", set: with(func(s *Set) { s.Cohort = "engagement_signals" }), field: "Cohort", rule: "collides with Signals"},
		{name: "fields checked in order", set: with(func(s *Set) { s.Signals = s.Commands; s.Cohort = "" }), field: "Signals", rule: "is also"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.set.Validate()
			if tt.field == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			var te *TopicError
			if !errors.As(err, &te) {
				t.Fatalf("Validate() = %v, want a *TopicError", err)
			}
			if te.Field != tt.field || !strings.Contains(te.Rule, tt.rule) {
				t.Errorf("Validate() = %+v, want field %s and rule containing %q", te, tt.field, tt.rule)
			}
			if !strings.HasPrefix(err.Error(), "topics: "+tt.field+": ") {
				t.Errorf("error text %q does not start with the field", err)
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	want := Set{
		Commands:  "membership.commands",
		Signals:   "engagement.signals",
		Cohort:    "cohort.signals",
		DLQ:       "cohortgate.dlq",
		Changelog: "membership.changelog",
	}
	if got := Defaults(); !reflect.DeepEqual(got, want) {
		t.Fatalf("Defaults() = %+v, want %+v", got, want)
	}
}

func TestSpecs(t *testing.T) {
	s := Set{Commands: "c", Signals: "s", Cohort: "co", DLQ: "d", Changelog: "cl", Routes: []Route{{In: "a", Out: "ao"}}}
	want := []Spec{
		{Topic: "c", Role: "Commands", SamePartitionsAsSignals: true, Configs: map[string]string{
			"cleanup.policy": "delete", "retention.ms": "-1", "retention.bytes": "-1",
		}},
		{Topic: "s", Role: "Signals"},
		{Topic: "co", Role: "Cohort"},
		{Topic: "d", Role: "DLQ"},
		{Topic: "cl", Role: "Changelog", Configs: map[string]string{"cleanup.policy": "compact"}},
		{Topic: "a", Role: "Routes[0].In", SamePartitionsAsSignals: true},
		{Topic: "ao", Role: "Routes[0].Out"},
	}
	got := s.Specs()
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Specs() =\n%+v\nwant\n%+v", got, want)
	}
	// Roles are the Set's field names, as in TopicError.Field.
	for i, f := range s.fields() {
		if got[i].Role != f.name || got[i].Topic != f.topic {
			t.Errorf("Specs()[%d] = %s %s, want %s %s", i, got[i].Role, got[i].Topic, f.name, f.topic)
		}
	}
	// Each call returns fresh maps.
	got[0].Configs["retention.ms"] = "1"
	if again := s.Specs(); again[0].Configs["retention.ms"] != "-1" {
		t.Errorf("Specs() shares its Configs maps between calls")
	}
}

func TestParseRoute(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Route
		rule string // in the error; "" for none
	}{
		{in: "attribution.events=cohort.attribution", want: Route{In: "attribution.events", Out: "cohort.attribution"}},
		{in: " a = b ", want: Route{In: "a", Out: "b"}},
		{in: "a", rule: `has no "="`},
		{in: "=b", rule: `topic "" is empty`},
		{in: "a=", rule: `topic "" is empty`},
		{in: "a b=c", rule: `topic "a b" has ' '`},
		{in: "a=b=c", rule: `topic "b=c" has '='`},
	} {
		got, err := ParseRoute(tc.in)
		switch {
		case tc.rule == "" && err != nil:
			t.Errorf("ParseRoute(%q): %v", tc.in, err)
		case tc.rule != "" && (err == nil || !strings.Contains(err.Error(), tc.rule)):
			t.Errorf("ParseRoute(%q) = %v, %v; want an error with %q", tc.in, got, err, tc.rule)
		case tc.rule == "" && got != tc.want:
			t.Errorf("ParseRoute(%q) = %v, want %v", tc.in, got, tc.want)
		}
		if tc.rule == "" {
			if again, err := ParseRoute(got.String()); err != nil || again != got {
				t.Errorf("ParseRoute(%q.String()) = %v, %v; want %v", tc.in, again, err, got)
			}
		}
	}
}

func TestRoutes(t *testing.T) {
	s := Defaults()
	if got, want := s.AllRoutes(), []Route{{In: Signals, Out: Cohort}}; !reflect.DeepEqual(got, want) {
		t.Errorf("AllRoutes() of the defaults = %v, want %v", got, want)
	}
	s.Routes = []Route{{In: "attribution.events", Out: "cohort.attribution"}}
	if got, want := s.Inputs(), []Topic{Signals, "attribution.events"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Inputs() = %v, want %v", got, want)
	}
	c := s.Clone()
	c.Routes[0].In = "x"
	if s.Routes[0].In != "attribution.events" {
		t.Errorf("Clone shares Routes")
	}
	for _, tc := range []struct {
		name        string
		routes      []Route
		field, rule string
	}{
		{name: "In is the first route's Out", routes: []Route{{In: Cohort, Out: "o"}}, field: "Routes[0].In", rule: "is also Cohort"},
		{name: "Out is Changelog", routes: []Route{{In: "i", Out: Changelog}}, field: "Routes[0].Out", rule: "is also Changelog"},
		{name: "two routes share an In", routes: []Route{{In: "i", Out: "o"}, {In: "i", Out: "p"}}, field: "Routes[1].In", rule: "is also Routes[0].In"},
		{name: "bad name", routes: []Route{{In: "i", Out: "o p"}}, field: "Routes[0].Out", rule: "' '"},
	} {
		s := Defaults()
		s.Routes = tc.routes
		var te *TopicError
		err := s.Validate()
		if !errors.As(err, &te) || te.Field != tc.field || !strings.Contains(te.Rule, tc.rule) {
			t.Errorf("%s: Validate() = %v, want field %s and rule %q", tc.name, err, tc.field, tc.rule)
		}
	}
}
