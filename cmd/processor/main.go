// Command processor runs cohortgate: it forwards engagement signals to the
// cohort topic unless their user has left, and records every leave
// durably. See the README for a walkthrough.
//
// Usage:
//
//	processor try [flags]            run on an embedded broker, for trying it out (make run)
//	processor run --brokers B [flags] run against a Kafka cluster
//	processor leave --user N         publish a leave command
//	processor leave --from FILE --job LABEL@TIME   a leave for every user of FILE, with receipts and a summary
//	processor rejoin --user N        publish a rejoin command (--from FILE, too)
//	processor status --user N        a user's record, from the running processor (or, with --brokers, the changelog)
//	processor version                the module version and VCS revision (also --version)
//
// The embedded broker is an explicit choice: run without --brokers
// refuses to start, so that a misspelt setting never puts a production
// processor on a toy broker. Every flag has an environment equivalent:
// --data-dir is COHORTGATE_DATA_DIR; a COHORTGATE_ variable that is no
// flag is refused.
package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/cohortgate/cohortgate/internal/cmdline"
	"github.com/cohortgate/cohortgate/topics"
)

func main() { cmdline.Main("processor", 1, dispatch) }

// command is one subcommand of the processor.
type command struct {
	name    string
	summary string // one line, for processor --help
	run     cmdline.Func
}

// commands are the subcommands in the order --help lists them.
func commands() []command {
	return []command{
		{"try", "run on an embedded Kafka-protocol broker on 127.0.0.1:9092, for trying it out (never production); make run runs it",
			func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
				return run(ctx, args, true, stdout, stderr)
			}},
		{"run", "run against the Kafka cluster at --brokers (COHORTGATE_BROKERS): the production mode",
			func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
				return run(ctx, args, false, stdout, stderr)
			}},
		{"leave", "publish a leave command for one user (--user N, --wait for the receipt), or for every user of a file (--from FILE --job LABEL@TIME)",
			func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
				return publish(ctx, topics.Leave, args, stdout, stderr)
			}},
		{"rejoin", "publish a rejoin command for one user (--user N, --wait for the receipt), or for every user of a file (--from FILE --job LABEL@TIME)",
			func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
				return publish(ctx, topics.Rejoin, args, stdout, stderr)
			}},
		{"status", "print a user's membership record, from the running processor or, with --brokers, the changelog", status},
		{"version", "print the module version, VCS revision and Go version of this build (also --version)", version},
		{"help", "print this help, or a command's flags: processor help COMMAND", nil},
	}
}

// help is processor --help: every command, one line each.
func help(w io.Writer) {
	fmt.Fprint(w, `processor is cohortgate's stream processor: it forwards engagement signals
to the cohort topic unless their user has left, and records every leave.

usage: processor COMMAND [flags]

commands:
`)
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	for _, c := range commands() {
		fmt.Fprintf(tw, "  %s\t%s\n", c.name, c.summary)
	}
	tw.Flush()
	fmt.Fprint(w, `
processor COMMAND --help lists a command's flags. Every flag --some-name can
also be set as COHORTGATE_SOME_NAME; a flag on the command line wins.
`)
}

func dispatch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		help(stderr)
		return &cmdline.Failed{Code: 2} // nothing was asked: nothing runs
	}
	name, rest := args[0], args[1:]
	switch name {
	case "-h", "-help", "--help":
		help(stdout)
		return nil
	case "-version", "--version":
		return version(ctx, rest, stdout, stderr)
	case "help":
		if len(rest) == 0 {
			help(stdout)
			return nil
		}
		name, rest = rest[0], []string{"--help"}
	}
	var names []string
	for _, c := range commands() {
		if c.name == name && c.run != nil {
			return c.run(ctx, rest, stdout, stderr)
		}
		names = append(names, c.name)
	}
	if strings.HasPrefix(name, "-") {
		return fmt.Errorf("%s: a command comes first, its flags after it (processor run --brokers=…, processor try); processor --help lists the commands", name)
	}
	sort.Strings(names)
	if near := closest(name, names); near != "" {
		return fmt.Errorf("unknown command %q; did you mean %s? processor --help lists the commands", name, near)
	}
	return fmt.Errorf("unknown command %q; want one of %s (processor --help says what each does)", name, strings.Join(names, ", "))
}
