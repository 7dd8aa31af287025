package main

import (
	"bytes"
	"context"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

func TestBuildOf(t *testing.T) {
	for _, tc := range []struct {
		name string
		bi   *debug.BuildInfo
		ok   bool
		want build
	}{
		{"no build info", nil, false, build{Version: "(devel)", Revision: "unknown", Go: "unknown"}},
		{"without vcs", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "(devel)"}}, true,
			build{Version: "(devel)", Revision: "unknown", Go: "go1.26.8"}},
		{"tagged, clean", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v1.2.3"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "cc597aae10496c017def4f4863a9c737d8af642b"}, {Key: "vcs.time", Value: "2026-12-06T16:40:30Z"}, {Key: "vcs.modified", Value: "false"}}}, true,
			build{Version: "v1.2.3", Revision: "cc597aae10496c017def4f4863a9c737d8af642b", Time: "2026-12-06T16:40:30Z", Go: "go1.26.8"}},
		{"modified", &debug.BuildInfo{GoVersion: "go1.26.8", Main: debug.Module{Version: "v0.0.0-20261206164030-cc597aae1049+dirty"}, Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "cc597aae"}, {Key: "vcs.modified", Value: "true"}}}, true,
			build{Version: "v0.0.0-20261206164030-cc597aae1049+dirty", Revision: "cc597aae+dirty", Go: "go1.26.8"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := buildOf(tc.bi, tc.ok); got != tc.want {
				t.Errorf("buildOf = %+v, want %+v", got, tc.want)
			}
		})
	}
}

// TestVersion: `processor version` and `processor --version` print the
// same line: the module version, the revision and the Go version.
func TestVersion(t *testing.T) {
	var outs []string
	for _, args := range [][]string{{"version"}, {"--version"}} {
		var out bytes.Buffer
		if err := dispatch(context.Background(), args, &out, &out); err != nil {
			t.Fatalf("processor %v: %v", args, err)
		}
		outs = append(outs, out.String())
	}
	b := thisBuild()
	for _, want := range []string{"cohortgate processor " + b.Version, "revision " + b.Revision, runtime.Version()} {
		if !strings.Contains(outs[0], want) {
			t.Errorf("processor version printed %q, want %q in it", outs[0], want)
		}
	}
	if outs[0] != outs[1] || strings.Count(outs[0], "\n") != 1 {
		t.Errorf("version %q and --version %q: want the same one line", outs[0], outs[1])
	}
}

// TestBuildInfoMetric: cohortgate_build_info is 1, labelled with the
// build and the mode.
func TestBuildInfoMetric(t *testing.T) {
	reg := prometheus.NewRegistry()
	registerBuildInfo(reg, build{Version: "v1.2.3", Revision: "abc", Go: "go1.26.8"}, true)
	mfs, err := reg.Gather()
	if err != nil || len(mfs) != 1 || mfs[0].GetName() != "cohortgate_build_info" || len(mfs[0].GetMetric()) != 1 {
		t.Fatalf("gathered %v, %v", mfs, err)
	}
	m := mfs[0].GetMetric()[0]
	labels := make(map[string]string)
	for _, l := range m.GetLabel() {
		labels[l.GetName()] = l.GetValue()
	}
	want := map[string]string{"version": "v1.2.3", "revision": "abc", "go": "go1.26.8", "embedded": "true"}
	if m.GetGauge().GetValue() != 1 || len(labels) != len(want) {
		t.Errorf("cohortgate_build_info %v = %v, want %v = 1", labels, m.GetGauge().GetValue(), want)
	}
	for k, v := range want {
		if labels[k] != v {
			t.Errorf("label %s=%q, want %q", k, labels[k], v)
		}
	}
}
