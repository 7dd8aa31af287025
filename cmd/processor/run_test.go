package main

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/cohortgate/cohortgate/topics"
)

// TestRunHelp: `processor run --help` documents every flag with its
// environment variable and default.
func TestRunHelp(t *testing.T) {
	var out bytes.Buffer
	if _, err := parseRun([]string{"--help"}, false, &out); !errors.Is(err, flag.ErrHelp) {
		t.Fatalf("parseRun(--help) = %v, want flag.ErrHelp", err)
	}
	help := out.String()
	var names []string
	for _, l := range strings.Split(help, "\n") {
		if f := strings.Fields(l); len(f) >= 3 && strings.HasPrefix(f[0], "--") {
			names = append(names, strings.TrimPrefix(f[0], "--"))
			if f[1] != envName(f[0][2:]) || f[2] != "default" {
				t.Errorf("help line %q: want --name ENV default value", l)
			}
		}
	}
	for _, want := range []string{
		"brokers", "data-dir", "http-addr", "pprof", "create-topics",
		"kafka-tls", "kafka-tls-ca", "kafka-tls-cert", "kafka-tls-key", "kafka-tls-server-name",
		"kafka-sasl-mechanism", "kafka-sasl-user", "kafka-sasl-password", "kafka-sasl-password-file",
		"kafka-sasl-oauth-token-file", "kafka-check-timeout",
	} {
		found := false
		for _, n := range names {
			found = found || n == want
		}
		if !found {
			t.Errorf("--help does not document --%s:\n%s", want, help)
		}
	}
	if !regexp.MustCompile(`--http-addr\s+COHORTGATE_HTTP_ADDR\s+default 127\.0\.0\.1:`).MatchString(help) {
		t.Errorf("--help does not show --http-addr's env name and loopback default:\n%s", help)
	}
}

// TestRunValidate: each bad setting is one line naming its flag.
func TestRunValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		env  map[string]string
		want []string // each a line of the error, by prefix
	}{
		{"bad broker", []string{"--brokers", "kafka"}, nil, []string{"--brokers:"}},
		{"bad log level and format", []string{"--log-level", "loud", "--log-format", "xml"}, nil,
			[]string{"--log-level:", "--log-format:"}},
		{"session timeout", []string{"--session-timeout", "10ms"}, nil, []string{"--session-timeout:"}},
		{"stall timeout", []string{"--stall-timeout", "10ms"}, nil, []string{"--stall-timeout:"}},
		{"stall halt below the timeout", []string{"--stall-timeout", "30s", "--stall-halt", "10s"}, nil, []string{"--stall-halt:"}},
		{"no brokers", nil, nil, []string{"--brokers: required"}},
		{"unknown mechanism", []string{"--brokers", "k:9092", "--kafka-sasl-mechanism", "GSSAPI"}, nil,
			[]string{`--kafka-sasl-mechanism "GSSAPI": "GSSAPI" is not PLAIN`}},
		{"bad env", nil, map[string]string{"COHORTGATE_GRACE": "soon"}, []string{"COHORTGATE_GRACE="}},
		{"http addr", []string{"--http-addr", "8080"}, nil, []string{"--http-addr:"}},
		{"route without =", []string{"--route", "a.b"}, nil, []string{`route "a.b" has no "="`}},
		{"route and signals topic", []string{"--route", "a=b", "--signals-topic", "s"}, nil, []string{"--route: the first route replaces"}},
		{"route clashes", []string{"--route", "a=b", "--route", "b=c"}, nil, []string{`Routes[0].In: topic "b" is also Cohort`}},
		{"bad route env", nil, map[string]string{"COHORTGATE_ROUTES": "a=b,c"}, []string{"COHORTGATE_ROUTES="}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			args := append([]string{"--data-dir", t.TempDir()}, tc.args...)
			if tc.name != "no brokers" && tc.name != "bad broker" {
				args = append([]string{"--brokers", "k:9092"}, args...)
			}
			_, err := parseRun(args, false, io.Discard)
			if err == nil {
				t.Fatal("parseRun accepted it")
			}
			lines := strings.Split(err.Error(), "\n")
			for _, w := range tc.want {
				ok := false
				for _, l := range lines {
					ok = ok || strings.Contains(l, w)
				}
				if !ok {
					t.Errorf("no line with %q in:\n%v", w, err)
				}
			}
			if len(lines) < len(tc.want) {
				t.Errorf("%d lines for %d problems:\n%v", len(lines), len(tc.want), err)
			}
		})
	}
	if _, err := parseRun([]string{"--data-dir", t.TempDir(), "--brokers", "k:9092"}, false, io.Discard); err != nil {
		t.Errorf("defaults rejected: %v", err)
	}
	if _, err := parseRun([]string{"--data-dir", t.TempDir()}, true, io.Discard); err != nil {
		t.Errorf("try's defaults rejected: %v", err)
	}
}

// TestRunRoutes: --route repeats, COHORTGATE_ROUTES is a comma list, and
// the first route replaces the signals and cohort topics.
func TestRunRoutes(t *testing.T) {
	want := []topics.Route{{In: "engagement.signals", Out: "cohort.community"}, {In: "attribution.events", Out: "cohort.attribution"}}
	check := func(name string, o *runOptions, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if got := o.topicSet().AllRoutes(); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: routes %v, want %v", name, got, want)
		}
	}
	o, err := parseRun([]string{"--data-dir", t.TempDir(), "--route", want[0].String(), "--route", want[1].String()}, true, io.Discard)
	check("flags", o, err)
	t.Setenv("COHORTGATE_ROUTES", want[0].String()+", "+want[1].String())
	o, err = parseRun([]string{"--data-dir", t.TempDir()}, true, io.Discard)
	check("COHORTGATE_ROUTES", o, err)
	o, err = parseRun([]string{"--data-dir", t.TempDir(), "--route", "x=y"}, true, io.Discard)
	if err != nil || len(o.topicSet().AllRoutes()) != 1 {
		t.Errorf("a --route flag wins over COHORTGATE_ROUTES: %v, %v", o.topicSet().AllRoutes(), err)
	}
}
