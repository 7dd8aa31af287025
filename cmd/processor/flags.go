package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
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

// testVariable reports whether name is a COHORTGATE_ variable that the
// project's tests and CI read, not the processor: a processor they start
// inherits them, and must not refuse to start for it.
func testVariable(name string) bool {
	switch name {
	case "COHORTGATE_REQUIRE_KCAT", "COHORTGATE_REQUIRE_SECURE", "COHORTGATE_FAULT_SEED",
		"COHORTGATE_FAULT_CHILD", "COHORTGATE_SEED", "COHORTGATE_KGO_DEBUG":
		return true
	}
	return false
}

// flags is a flag set whose every flag also reads an environment variable.
// A flag on the command line wins over its variable, which wins over the
// default. Its errors are one line each: the flag or variable, what it
// wants, a "did you mean" for a misspelt name, and where the full usage is.
// The flag package itself prints nothing.
type flags struct {
	*flag.FlagSet
	cmd      string
	synopsis string
	help     io.Writer // where --help writes the usage
	// refused is the last value a flag's Set refused, for the message.
	refused *refusal
}

type refusal struct {
	flag, value string
	err         error
}

func newFlags(cmd, synopsis string, help io.Writer) *flags {
	fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.Usage = func() {} // --help prints through f.usage; an error is one line
	return &flags{FlagSet: fs, cmd: cmd, synopsis: synopsis, help: help}
}

// usage writes the command's synopsis and every flag with its variable
// and default.
func (f *flags) usage(w io.Writer) {
	fmt.Fprintf(w, "usage: processor %s [flags]\n\n%s\n\nflags (each also read from its environment variable):\n", f.cmd, f.synopsis)
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

// seeHelp is where the full usage is, for the end of an error.
func (f *flags) seeHelp() string {
	return "processor " + f.cmd + " --help lists every flag"
}

// checked wraps a flag's value to remember what it refused.
type checked struct {
	flag.Value
	name string
	f    *flags
}

func (c checked) Set(s string) error {
	err := c.Value.Set(s)
	if err != nil {
		c.f.refused = &refusal{flag: c.name, value: s, err: err}
	}
	return err
}

// IsBoolFlag keeps --flag without a value working for booleans.
func (c checked) IsBoolFlag() bool {
	b, ok := c.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

func (c checked) Get() any {
	if g, ok := c.Value.(flag.Getter); ok {
		return g.Get()
	}
	return nil
}

// wants says what a flag's value must look like, from its type; "" when
// the value's own error says it better.
func wants(fl *flag.Flag) string {
	g, ok := fl.Value.(flag.Getter)
	if !ok {
		return ""
	}
	switch g.Get().(type) {
	case time.Duration:
		return "want a duration such as 2s, 500ms or 1m30s"
	case bool:
		return "want true or false"
	case int, int64:
		return "want a whole number"
	case uint, uint64:
		return "want a whole number, 0 or more"
	case float64:
		return "want a number"
	}
	return ""
}

// valueError is the one line for a value a flag refused; given is how it
// was given: --grace "2", or COHORTGATE_GRACE="2".
func (f *flags) valueError(fl *flag.Flag, given string, err error) error {
	what := wants(fl)
	if what == "" {
		what = err.Error()
	}
	return fmt.Errorf("%s: %s (e.g. --%s=%s); %s", given, what, fl.Name, example(fl), f.seeHelp())
}

// example is a valid value of fl for an error message: its default, or
// for an empty default a word of the type.
func example(fl *flag.Flag) string {
	if fl.DefValue != "" {
		return fl.DefValue
	}
	return "…"
}

// parse parses args, then fills every flag not given from its environment
// variable. Errors name the flag (or variable) and say what is expected.
// A COHORTGATE_ variable that is no flag is refused: of this command for
// run and try (a misspelt setting must not start a processor on
// defaults), of any command for the client commands (a pod's environment
// holds run's settings).
func (f *flags) parse(args []string) error {
	f.VisitAll(func(fl *flag.Flag) { fl.Value = checked{Value: fl.Value, name: fl.Name, f: f} })
	if err := f.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			f.usage(f.help)
			return err
		}
		return f.parseError(err)
	}
	if f.NArg() > 0 {
		return fmt.Errorf("unexpected argument %q: flags are written --name=value; %s", f.Arg(0), f.seeHelp())
	}
	var errs []error
	if err := f.checkEnv(os.Environ()); err != nil {
		errs = append(errs, err)
	}
	set := make(map[string]bool)
	f.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	f.VisitAll(func(fl *flag.Flag) {
		if set[fl.Name] {
			return
		}
		v, ok := os.LookupEnv(envName(fl.Name))
		if !ok {
			return
		}
		if err := fl.Value.Set(v); err != nil {
			errs = append(errs, f.valueError(fl, fmt.Sprintf("%s=%q (for --%s)", envName(fl.Name), v, fl.Name), err))
		}
	})
	return errors.Join(errs...)
}

// parseError turns the flag package's error into one line.
func (f *flags) parseError(err error) error {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		return f.unknownFlag(name)
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: -"); ok {
		if fl := f.Lookup(name); fl != nil {
			what := wants(fl)
			if what == "" {
				what = "want " + fl.Usage
			}
			return fmt.Errorf("--%s needs a value: %s (e.g. --%s=%s); %s", name, what, name, example(fl), f.seeHelp())
		}
	}
	if r := f.refused; r != nil {
		if fl := f.Lookup(r.flag); fl != nil {
			return f.valueError(fl, fmt.Sprintf("--%s %q", r.flag, r.value), r.err)
		}
	}
	return fmt.Errorf("%s; %s", msg, f.seeHelp())
}

// unknownFlag says a flag is not one of this command's, and what was
// probably meant: a near name here, or the command it belongs to.
func (f *flags) unknownFlag(name string) error {
	name = strings.TrimLeft(name, "-")
	var names []string
	f.VisitAll(func(fl *flag.Flag) { names = append(names, fl.Name) })
	if near := closest(name, names); near != "" {
		return fmt.Errorf("unknown flag --%s; did you mean --%s? %s", name, near, f.seeHelp())
	}
	for _, r := range f.related() {
		if r.Lookup(name) != nil {
			return fmt.Errorf("--%s is a flag of processor %s, not of processor %s; %s", name, r.cmd, f.cmd, f.seeHelp())
		}
	}
	return fmt.Errorf("unknown flag --%s; %s", name, f.seeHelp())
}

// strict reports whether every COHORTGATE_ variable must be a flag of
// this very command: so for the processor itself.
func (f *flags) strict() bool { return f.cmd == "run" || f.cmd == "try" }

// related are the flag sets of the processor's two modes other than f's,
// for "that is a flag of processor try" and for the variables a client
// command tolerates.
func (f *flags) related() []*flags {
	var out []*flags
	for _, embedded := range []bool{false, true} {
		if modeName(embedded) == f.cmd {
			continue
		}
		r := newFlags(modeName(embedded), "", io.Discard)
		defineRun(r, &runOptions{}, embedded)
		out = append(out, r)
	}
	return out
}

// checkEnv refuses COHORTGATE_ variables that set nothing, each on its
// own line with a "did you mean".
func (f *flags) checkEnv(environ []string) error {
	own := make(map[string]bool)
	f.VisitAll(func(fl *flag.Flag) { own[envName(fl.Name)] = true })
	elsewhere := make(map[string]string) // variable → the command it belongs to
	for _, r := range f.related() {
		r.VisitAll(func(fl *flag.Flag) {
			if _, ok := elsewhere[envName(fl.Name)]; !ok {
				elsewhere[envName(fl.Name)] = r.cmd
			}
		})
	}
	var candidates []string
	for v := range own {
		candidates = append(candidates, v)
	}
	if !f.strict() {
		for v := range elsewhere {
			candidates = append(candidates, v)
		}
	}
	sort.Strings(candidates)
	var errs []error
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, envPrefix) || own[name] || testVariable(name) {
			continue
		}
		if cmd, ok := elsewhere[name]; ok {
			if !f.strict() {
				continue
			}
			if name == envName("brokers") {
				errs = append(errs, fmt.Errorf("%s is set, but processor try serves its own embedded broker: unset it, or use processor run to run against the brokers it names", name))
			} else {
				errs = append(errs, fmt.Errorf("%s is a setting of processor %s, not of processor %s: unset it", name, cmd, f.cmd))
			}
			continue
		}
		if near := closest(name, candidates); near != "" {
			errs = append(errs, fmt.Errorf("unknown variable %s; did you mean %s? %s", name, near, f.seeHelp()))
		} else {
			errs = append(errs, fmt.Errorf("unknown variable %s: no flag of processor %s reads it; %s", name, f.cmd, f.seeHelp()))
		}
	}
	return errors.Join(errs...)
}

// closest is the candidate nearest to s by edit distance, or "" when
// none is near enough to be a likely typo. The variables' common prefix
// does not count.
func closest(s string, candidates []string) string {
	s = strings.ToLower(strings.TrimPrefix(s, envPrefix))
	best, bestD := "", -1
	for _, c := range candidates {
		d := distance(s, strings.ToLower(strings.TrimPrefix(c, envPrefix)))
		if bestD < 0 || d < bestD {
			best, bestD = c, d
		}
	}
	limit := max(2, len(s)/4)
	if bestD < 0 || bestD > limit {
		return ""
	}
	return best
}

// distance is the Levenshtein distance between a and b, in bytes.
func distance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
