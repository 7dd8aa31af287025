package cmdline

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
)

// Func is a command: it reads args (without the program name) and writes
// to stdout and stderr. It returns flag.ErrHelp after printing the usage
// asked for with -h, and ends when ctx does.
type Func func(ctx context.Context, args []string, stdout, stderr io.Writer) error

// Failed ends a command with exit status Code and no message: the command
// has already said what failed (a verdict table, say).
type Failed struct{ Code int }

func (f *Failed) Error() string { return "exit status " + strconv.Itoa(f.Code) }

// Main runs run with the process's arguments, a context that SIGINT and
// SIGTERM cancel, and the process's stdout and stderr, then exits: 0 when
// run returns nil or flag.ErrHelp, a Failed's Code, or else code after
// printing "name: err" to stderr.
func Main(name string, code int, run Func) {
	os.Exit(exit(name, code, run, os.Args[1:], os.Stdout, os.Stderr))
}

// exit is Main without the process: the exit status.
func exit(name string, code int, run Func, args []string, stdout, stderr io.Writer) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, args, stdout, stderr)
	stop()
	var failed *Failed
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &failed):
		return failed.Code
	default:
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return code
	}
}

// List splits a comma-separated flag value, trimming spaces around each
// item and dropping empty ones: "a, b,,c" is [a b c], "" is nil.
func List(s string) []string {
	var out []string
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}
