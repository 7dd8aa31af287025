package main

import (
	"context"
	"fmt"
	"io"
	"runtime/debug"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// build is what the Go toolchain stamped into this binary.
type build struct {
	// Version is the main module's version: a tag, a pseudo-version of
	// the commit, or "(devel)" when the toolchain could not tell.
	Version string
	// Revision is the VCS commit the binary was built from, with
	// "+dirty" when the work tree had changes; "unknown" without VCS
	// information (go run, -buildvcs=false, a tarball).
	Revision string
	Time     string // the commit's time, RFC 3339; "" when unknown
	Go       string // the toolchain, e.g. go1.26.8
}

// buildOf reads the build information of bi, as debug.ReadBuildInfo
// returns it (ok false: none).
func buildOf(bi *debug.BuildInfo, ok bool) build {
	b := build{Version: "(devel)", Revision: "unknown", Go: "unknown"}
	if !ok || bi == nil {
		return b
	}
	if bi.Main.Version != "" {
		b.Version = bi.Main.Version
	}
	b.Go = bi.GoVersion
	modified := false
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Revision = s.Value
		case "vcs.time":
			b.Time = s.Value
		case "vcs.modified":
			modified, _ = strconv.ParseBool(s.Value)
		}
	}
	if modified && b.Revision != "unknown" {
		b.Revision += "+dirty"
	}
	return b
}

func thisBuild() build { return buildOf(debug.ReadBuildInfo()) }

func (b build) String() string {
	s := fmt.Sprintf("cohortgate processor %s, revision %s", b.Version, b.Revision)
	if b.Time != "" {
		s += " (" + b.Time + ")"
	}
	return s + ", " + b.Go
}

// version is `processor version` and `processor --version`.
func version(_ context.Context, args []string, stdout, _ io.Writer) error {
	f := newFlags("version", "Print the module version, VCS revision and Go version of this build.", stdout)
	if err := f.parse(args); err != nil {
		return err
	}
	_, err := fmt.Fprintln(stdout, thisBuild())
	return err
}

// registerBuildInfo exports cohortgate_build_info, always 1, whose labels
// say which build runs and in which mode, as Prometheus' own binaries
// export prometheus_build_info.
func registerBuildInfo(reg prometheus.Registerer, b build, embedded bool) {
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "cohortgate_build_info",
		Help: "Always 1; the labels name the build: module version, VCS revision, Go version, and whether the broker is the embedded one (processor try).",
		ConstLabels: prometheus.Labels{
			"version": b.Version, "revision": b.Revision, "go": b.Go, "embedded": strconv.FormatBool(embedded),
		},
	}, func() float64 { return 1 }))
}
