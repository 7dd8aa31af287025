package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"os"
	"strings"
	"testing"

	"github.com/cohortgate/cohortgate/internal/cmdline"
)

// inEmptyDir runs the test in an empty directory and returns a check that
// nothing was created in it: a processor that refused to start leaves no
// data dir behind.
func inEmptyDir(t *testing.T) func() {
	dir := t.TempDir()
	t.Chdir(dir)
	return func() {
		t.Helper()
		if ents, _ := os.ReadDir(dir); len(ents) > 0 {
			t.Errorf("the refused start created %s in the current directory", ents[0].Name())
		}
	}
}

// TestBareProcessorPrintsHelp: `processor` alone starts nothing (no broker,
// no ./cohortgate-data) and prints the commands.
func TestBareProcessorPrintsHelp(t *testing.T) {
	nothingCreated := inEmptyDir(t)
	var out, errs bytes.Buffer
	err := dispatch(context.Background(), nil, &out, &errs)
	var failed *cmdline.Failed
	if !errors.As(err, &failed) || failed.Code != 2 {
		t.Errorf("processor alone: %v, want exit status 2", err)
	}
	if !strings.Contains(errs.String(), "commands:") || !strings.Contains(errs.String(), "  try ") {
		t.Errorf("processor alone printed:\n%s%s", out.String(), errs.String())
	}
	nothingCreated()
}

// TestHelpListsEveryCommand: `processor --help` lists every command, one
// line each, and `processor help run` is run's flags.
func TestHelpListsEveryCommand(t *testing.T) {
	for _, args := range [][]string{{"--help"}, {"-h"}, {"help"}} {
		var out bytes.Buffer
		if err := dispatch(context.Background(), args, &out, &out); err != nil {
			t.Fatalf("processor %v: %v", args, err)
		}
		lines := strings.Split(out.String(), "\n")
		for _, c := range commands() {
			n := 0
			for _, l := range lines {
				if f := strings.Fields(l); len(f) > 1 && f[0] == c.name && strings.HasPrefix(l, "  ") {
					n++
				}
			}
			if n != 1 {
				t.Errorf("processor %v: %d lines for command %s, want 1:\n%s", args, n, c.name, out.String())
			}
		}
	}
	for _, cmd := range []string{"run", "try", "leave", "rejoin", "status"} {
		var out bytes.Buffer
		err := dispatch(context.Background(), []string{"help", cmd}, &out, &out)
		if !errors.Is(err, flag.ErrHelp) || !strings.Contains(out.String(), "usage: processor "+cmd+" [flags]") {
			t.Errorf("processor help %s: %v\n%s", cmd, err, out.String())
		}
	}
}

// TestRunNeedsBrokers: without brokers, run refuses at once and says how
// to get either mode; it starts no embedded broker and creates nothing.
// COHORTGATE_BROKER (one letter off) is the same mistake, told apart.
func TestRunNeedsBrokers(t *testing.T) {
	nothingCreated := inEmptyDir(t)
	for _, tc := range []struct {
		name string
		env  map[string]string
		want []string
	}{
		{"no brokers", nil, []string{"--brokers: required", "processor try"}},
		{"misspelt variable", map[string]string{"COHORTGATE_BROKER": "kafka:9092"},
			[]string{"unknown variable COHORTGATE_BROKER; did you mean COHORTGATE_BROKERS?"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			var out, errs bytes.Buffer
			err := dispatch(context.Background(), []string{"run", "--http-addr", "127.0.0.1:0"}, &out, &errs)
			if err == nil {
				t.Fatal("run without brokers started")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not say %q:\n%v", w, err)
				}
			}
			if out.Len()+errs.Len() > 0 {
				t.Errorf("run printed beside its error:\n%s%s", out.String(), errs.String())
			}
		})
	}
	nothingCreated()
}

// TestUnknownVariables: a COHORTGATE_ variable that sets nothing fails the
// start of run and try with a "did you mean"; the client commands accept
// the processor's own variables (a pod's environment), and everyone
// accepts the test suites' variables.
func TestUnknownVariables(t *testing.T) {
	for _, tc := range []struct {
		name    string
		args    []string
		env     map[string]string
		want    string // in the error; "" for no error about variables
		notWant string
	}{
		{"run, misspelt", []string{"run", "--brokers", "k:9092"}, map[string]string{"COHORTGATE_GRAEC": "1s"},
			"unknown variable COHORTGATE_GRAEC; did you mean COHORTGATE_GRACE?", ""},
		{"run, unrelated", []string{"run", "--brokers", "k:9092"}, map[string]string{"COHORTGATE_COLOUR": "blue"},
			"unknown variable COHORTGATE_COLOUR: no flag of processor run reads it", ""},
		{"run, try's variable", []string{"run", "--brokers", "k:9092"}, map[string]string{"COHORTGATE_EMBEDDED_ADDR": "127.0.0.1:1"},
			"COHORTGATE_EMBEDDED_ADDR is a setting of processor try, not of processor run", ""},
		{"try, brokers set", []string{"try"}, map[string]string{"COHORTGATE_BROKERS": "kafka:9092"},
			"COHORTGATE_BROKERS is set, but processor try serves its own embedded broker", ""},
		{"leave, a pod's environment", []string{"leave", "--user", "x"}, map[string]string{"COHORTGATE_DATA_DIR": "/var/lib/cohortgate", "COHORTGATE_GRACE": "2s"},
			"--user", "COHORTGATE_"},
		{"leave, misspelt", []string{"leave", "--user", "x"}, map[string]string{"COHORTGATE_REQUEST_IDS": "a"},
			"did you mean COHORTGATE_REQUEST_ID?", ""},
		{"run, the tests' variables", []string{"run", "--brokers", "k:9092", "--grace", "-1s"}, map[string]string{"COHORTGATE_REQUIRE_KCAT": "1", "COHORTGATE_FAULT_SEED": "3"},
			"--grace", "COHORTGATE_"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Chdir(t.TempDir())
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			err := dispatch(context.Background(), tc.args, &bytes.Buffer{}, &bytes.Buffer{})
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error does not say %q:\n%v", tc.want, err)
			}
			if tc.notWant != "" && strings.Contains(err.Error(), tc.notWant) {
				t.Errorf("error mentions %q:\n%v", tc.notWant, err)
			}
		})
	}
}

// TestFlagErrors: a flag error is one line: the flag, what it wants, a
// "did you mean", and where the full usage is; nothing else is printed.
func TestFlagErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want []string
	}{
		{[]string{"run", "--brokers", "k:9092", "--grace", "2"},
			[]string{`--grace "2": want a duration such as 2s`, "processor run --help"}},
		{[]string{"try", "--create-topics=maybe"},
			[]string{`--create-topics "maybe": want true or false`, "processor try --help"}},
		{[]string{"run", "--brokr", "k:9092"},
			[]string{"unknown flag --brokr; did you mean --brokers?", "processor run --help"}},
		{[]string{"run", "--embedded-addr", "127.0.0.1:9"},
			[]string{"--embedded-addr is a flag of processor try, not of processor run"}},
		{[]string{"try", "--brokers", "k:9092"},
			[]string{"--brokers is a flag of processor run, not of processor try"}},
		{[]string{"leave", "--usr", "1"},
			[]string{"did you mean --user?", "processor leave --help"}},
		{[]string{"status", "--timeout"},
			[]string{"--timeout needs a value: want a duration such as 2s", "processor status --help"}},
		{[]string{"rnu"}, []string{`unknown command "rnu"; did you mean run?`}},
		{[]string{"--brokers", "k:9092"}, []string{"a command comes first"}},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			t.Chdir(t.TempDir())
			var out, errs bytes.Buffer
			err := dispatch(context.Background(), tc.args, &out, &errs)
			if err == nil {
				t.Fatal("accepted")
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("error of more than one line:\n%v", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error does not say %q:\n%v", w, err)
				}
			}
			if out.Len()+errs.Len() > 0 {
				t.Errorf("printed beside the error:\n%s%s", out.String(), errs.String())
			}
		})
	}
}
