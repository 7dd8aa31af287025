package topics

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// Topic is a Kafka topic name.
type Topic string

// The default topic names. Each is configurable through [Set].
const (
	// Commands: key user_id, value a JSON command (see DecodeCommand).
	// Retention is infinite: it is the source of truth for membership.
	Commands Topic = "membership.commands"
	// Signals: key user_id, opaque value; the record timestamp is the
	// event time.
	Signals Topic = "engagement.signals"
	// Cohort: the signals of Active users, forwarded unchanged.
	Cohort Topic = "cohort.signals"
	// DLQ: rejected records, unchanged, with reason headers.
	DLQ Topic = "cohortgate.dlq"
	// Changelog: compacted; per-user state and history for the purge job.
	Changelog Topic = "membership.changelog"
)

// maxTopicLen is Kafka's limit on a topic name, in bytes.
const maxTopicLen = 249

// Validate checks t against Kafka's rules for a topic name: 1 to 249 bytes,
// each one of [a-zA-Z0-9._-], and not "." or "..". The error is a
// *[TopicError] naming the topic and the rule.
func (t Topic) Validate() error {
	if rule := t.broken(); rule != "" {
		return &TopicError{Topic: t, Rule: rule}
	}
	return nil
}

// broken returns the first Kafka naming rule t breaks, or "".
func (t Topic) broken() string {
	switch {
	case len(t) == 0:
		return "is empty"
	case len(t) > maxTopicLen:
		return "is " + strconv.Itoa(len(t)) + " bytes, more than Kafka's " + strconv.Itoa(maxTopicLen)
	case t == "." || t == "..":
		return `is reserved: Kafka forbids "." and ".."`
	}
	for i := 0; i < len(t); i++ {
		c := t[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			what := strconv.QuoteRune(rune(c))
			if c >= utf8.RuneSelf || !strconv.IsPrint(rune(c)) {
				what = "byte 0x" + strconv.FormatUint(uint64(c), 16)
			}
			return "has " + what + " at byte " + strconv.Itoa(i) + "; Kafka allows only [a-zA-Z0-9._-]"
		}
	}
	return ""
}

// TopicError is a topic name Kafka would refuse, or a Set that could not be
// created because two of its names clash.
type TopicError struct {
	Field string // the Set field, such as "Cohort"; "" from Topic.Validate
	Topic Topic
	Rule  string // the rule broken, in words
}

// Error returns "topics: <field>: topic "<name>" <rule>", without the field
// when there is none.
func (e *TopicError) Error() string {
	name := []byte(e.Topic)
	s := "topics: "
	if e.Field != "" {
		s += e.Field + ": "
	}
	return s + "topic " + quote(name) + " " + e.Rule
}

// Set names every topic the processor uses. The zero Set is not valid; start
// from Defaults and change what differs.
//
// A route is a gated path: signals read from its In are forwarded to its
// Out unless their user had left. Signals to Cohort is the first route;
// Routes lists any others. Every route's In is co-partitioned with
// Commands, so one leave stops the user's signals on every route.
type Set struct {
	Commands, Signals, Cohort, DLQ, Changelog Topic
	// Routes are the routes beyond the first; nil for one route.
	Routes []Route
}

// Route is one gated path, from the signals topic In to the topic Out.
type Route struct{ In, Out Topic }

// String returns "IN=OUT", the form ParseRoute reads.
func (r Route) String() string { return string(r.In) + "=" + string(r.Out) }

// ParseRoute reads a route written "IN=OUT". Both names must be valid
// topic names (Topic.Validate).
func ParseRoute(s string) (Route, error) {
	in, out, ok := strings.Cut(s, "=")
	if !ok {
		return Route{}, &RouteError{Route: s, Rule: `has no "=": want IN=OUT`}
	}
	r := Route{In: Topic(strings.TrimSpace(in)), Out: Topic(strings.TrimSpace(out))}
	for _, t := range []Topic{r.In, r.Out} {
		if rule := t.broken(); rule != "" {
			return Route{}, &RouteError{Route: s, Rule: "topic " + quote([]byte(t)) + " " + rule}
		}
	}
	return r, nil
}

// RouteError is a route ParseRoute could not read.
type RouteError struct {
	Route string // as given
	Rule  string // what is wrong, in words
}

func (e *RouteError) Error() string {
	return "topics: route " + quote([]byte(e.Route)) + " " + e.Rule
}

// AllRoutes returns every route of s, the first (Signals to Cohort) first.
func (s Set) AllRoutes() []Route {
	return append([]Route{{In: s.Signals, Out: s.Cohort}}, s.Routes...)
}

// Inputs returns the In of every route, the first route's first.
func (s Set) Inputs() []Topic {
	out := make([]Topic, 0, 1+len(s.Routes))
	for _, r := range s.AllRoutes() {
		out = append(out, r.In)
	}
	return out
}

// Clone returns s with its own copy of Routes.
func (s Set) Clone() Set {
	s.Routes = append([]Route(nil), s.Routes...)
	return s
}

// Defaults returns the Set of default names.
func Defaults() Set {
	return Set{Commands: Commands, Signals: Signals, Cohort: Cohort, DLQ: DLQ, Changelog: Changelog}
}

// field is one topic of a Set with the name of its field.
type field struct {
	name  string
	topic Topic
}

// fields lists s's topics with their field names, in declaration order;
// the topics of Routes[i] are named "Routes[i].In" and "Routes[i].Out".
func (s Set) fields() []field {
	fs := []field{
		{"Commands", s.Commands},
		{"Signals", s.Signals},
		{"Cohort", s.Cohort},
		{"DLQ", s.DLQ},
		{"Changelog", s.Changelog},
	}
	for i, r := range s.Routes {
		n := "Routes[" + strconv.Itoa(i) + "]"
		fs = append(fs, field{n + ".In", r.In}, field{n + ".Out", r.Out})
	}
	return fs
}

// Validate checks that every name in s is a valid topic name and that Kafka
// could create them all side by side: no two are equal, and no two differ
// only in '.' against '_' (Kafka refuses the second of such a pair, since
// both map to one metric name). The error is a *[TopicError] naming the
// field, the later one of a clashing pair.
func (s Set) Validate() error {
	fields := s.fields()
	for i, f := range fields {
		if rule := f.topic.broken(); rule != "" {
			return &TopicError{Field: f.name, Topic: f.topic, Rule: rule}
		}
		for _, g := range fields[:i] {
			switch {
			case f.topic == g.topic:
				return &TopicError{Field: f.name, Topic: f.topic, Rule: "is also " + g.name}
			case metricName(f.topic) == metricName(g.topic):
				return &TopicError{Field: f.name, Topic: f.topic,
					Rule: "collides with " + g.name + " " + quote([]byte(g.topic)) + ": Kafka treats '.' and '_' alike"}
			}
		}
	}
	return nil
}

func metricName(t Topic) string { return strings.ReplaceAll(string(t), ".", "_") }

// Spec is what creating one topic needs besides its partition count and
// replication factor.
type Spec struct {
	Topic Topic
	// Role is the Set field the topic fills: "Commands", "Signals",
	// "Cohort", "DLQ", "Changelog", or "Routes[i].In" and "Routes[i].Out".
	Role string
	// Configs are the topic configs to set at creation; nil for none.
	Configs map[string]string
	// SamePartitionsAsSignals: the topic must have exactly as many
	// partitions as the signals topic (the processor refuses to start
	// otherwise), so partition p of both holds the same users. True of
	// Commands and of every route's In.
	SamePartitionsAsSignals bool
}

// Specs returns how to create each topic of s, in the order of the Set's
// fields. Commands keeps everything forever (retention.ms and
// retention.bytes -1, cleanup.policy delete, so a broker default of compact
// cannot lose a leave) and is co-partitioned with signals, as is every
// route's In; Changelog is compacted; the others need nothing special.
// Each call returns fresh maps.
func (s Set) Specs() []Spec {
	specs := []Spec{
		{Topic: s.Commands, Role: "Commands", SamePartitionsAsSignals: true, Configs: map[string]string{
			"cleanup.policy":  "delete",
			"retention.ms":    "-1",
			"retention.bytes": "-1",
		}},
		{Topic: s.Signals, Role: "Signals"},
		{Topic: s.Cohort, Role: "Cohort"},
		{Topic: s.DLQ, Role: "DLQ"},
		{Topic: s.Changelog, Role: "Changelog", Configs: map[string]string{
			"cleanup.policy": "compact",
		}},
	}
	for i, r := range s.Routes {
		n := "Routes[" + strconv.Itoa(i) + "]"
		specs = append(specs, Spec{Topic: r.In, Role: n + ".In", SamePartitionsAsSignals: true}, Spec{Topic: r.Out, Role: n + ".Out"})
	}
	return specs
}
