// Command processor runs cohortgate: it forwards engagement signals to the
// cohort topic unless their user has left, and records every leave
// durably. See the README for a walkthrough.
//
// Usage:
//
//	processor [run] [flags]          run the processor (the default)
//	processor leave --user N         publish a leave command
//	processor rejoin --user N        publish a rejoin command
//	processor status --user N        a user's record, from the running processor (or, with --brokers, the changelog)
//
// Every flag has an environment equivalent: --data-dir is COHORTGATE_DATA_DIR.
package main

import (
	"context"
	"fmt"
	"io"

	"github.com/cohortgate/cohortgate/cmd/internal/cmdline"
	"github.com/cohortgate/cohortgate/topics"
)

func main() { cmdline.Main("processor", 1, dispatch) }

func dispatch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	cmd := "run"
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		cmd, args = args[0], args[1:]
	}
	switch cmd {
	case "run":
		return run(ctx, args, stdout, stderr)
	case "leave":
		return publish(ctx, topics.Leave, args, stdout, stderr)
	case "rejoin":
		return publish(ctx, topics.Rejoin, args, stdout, stderr)
	case "status":
		return status(ctx, args, stdout, stderr)
	case "help":
		fmt.Fprintln(stdout, "usage: processor [run|leave|rejoin|status] [flags]; processor COMMAND --help for each command's flags")
		return nil
	default:
		return fmt.Errorf("unknown command %q; want run, leave, rejoin or status", cmd)
	}
}
