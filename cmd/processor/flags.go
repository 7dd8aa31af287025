package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
)

// envPrefix names the environment equivalents of flags: --data-dir is
// COHORTGATE_DATA_DIR.
const envPrefix = "COHORTGATE_"

func envName(flagName string) string {
	if flagName == "route" {
		return envPrefix + "ROUTES" // a list of routes, where the flag repeats
	}
	return envPrefix + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// flags is a flag set whose every flag also reads an environment variable.
// A flag on the command line wins over its variable, which wins over the
// default.
type flags struct {
	*flag.FlagSet
	cmd string
}

func newFlags(cmd, synopsis string, out io.Writer) *flags {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(out)
	f := &flags{FlagSet: fs, cmd: cmd}
	fs.Usage = func() { f.usage(synopsis) }
	return f
}

func (f *flags) usage(synopsis string) {
	w := f.Output()
	fmt.Fprintf(w, "usage: processor %s [flags]\n\n%s\n\nflags (each also read from its environment variable):\n", f.cmd, synopsis)
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	f.VisitAll(func(fl *flag.Flag) {
		def := fl.DefValue
		if def == "" {
			def = `""`
		}
		fmt.Fprintf(tw, "  --%s\t%s\tdefault %s\n", fl.Name, envName(fl.Name), def)
		fmt.Fprintf(tw, "    \t%s\n", fl.Usage) // not a cell: long text does not widen the columns
	})
	tw.Flush()
}

// parse parses args, then fills every flag not given from its environment
// variable. Errors name the flag (or variable) and say what is expected.
func (f *flags) parse(args []string) error {
	if err := f.Parse(args); err != nil {
		return err
	}
	if f.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q; flags are written --name=value", f.Arg(0))
	}
	set := make(map[string]bool)
	f.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	var errs []error
	f.VisitAll(func(fl *flag.Flag) {
		if set[fl.Name] {
			return
		}
		v, ok := os.LookupEnv(envName(fl.Name))
		if !ok {
			return
		}
		if err := fl.Value.Set(v); err != nil {
			errs = append(errs, fmt.Errorf("%s=%q (for --%s): %v", envName(fl.Name), v, fl.Name, err))
		}
	})
	return errors.Join(errs...)
}
