package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/cohortgate/cohortgate/integration/workload"
)

// profileJob is a CPU profile being taken from a child's /debug/pprof.
type profileJob struct {
	path string
	done chan error
}

// profileDelay is how long after t0 a profile starts: past the start-up.
const profileDelay = 2 * time.Second

// startProfile asks the process serving base for a profile of
// h.o.profileFor, starting after delay, and saves it in the work dir as
// <instance>.cpu.pprof (kind "profile": CPU) or <instance>.allocs.pprof
// (kind "allocs": the allocations made meanwhile, a delta).
func (h *harness) startProfile(ctx context.Context, instance, kind, base string, delay time.Duration) profileJob {
	file := instance + ".cpu.pprof"
	if kind != "profile" {
		file = instance + "." + kind + ".pprof"
	}
	j := profileJob{path: filepath.Join(h.work, file), done: make(chan error, 1)}
	go func() {
		j.done <- fetchProfile(ctx, base, kind, delay, h.o.profileFor, j.path)
	}()
	return j
}

func fetchProfile(ctx context.Context, base, kind string, delay, d time.Duration, path string) error {
	if err := workload.Sleep(ctx, delay); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, d+30*time.Second)
	defer cancel()
	url := fmt.Sprintf("%s/debug/pprof/%s?seconds=%d", base, kind, int(d.Seconds()))
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s: %s: %s", url, resp.Status, b)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// wait waits for the profile (bounded by its own timeout) and returns its
// path, or "" if none was taken.
func (j profileJob) wait(h *harness) string {
	if j.done == nil {
		return ""
	}
	if err := <-j.done; err != nil {
		h.printf("profile %s: %v", j.path, err)
		return ""
	}
	return j.path
}

// addProfile records the flat top of r's CPU profile for the report,
// and writes the flat and cumulative tops of its CPU and allocation
// profiles next to them as text (<profile>.top.txt), for reading without
// the binary.
func (h *harness) addProfile(ctx context.Context, r throughputResult) {
	for _, path := range []string{r.Profile, r.Allocs} {
		if path == "" {
			continue
		}
		var text strings.Builder
		for _, cum := range []bool{false, true} {
			top, err := pprofTop(ctx, h.o.goTool, r.binary, path, 40, cum)
			if err != nil {
				h.res.errorf("%s round %d profile: %v", r.Name, r.Round, err)
				return
			}
			fmt.Fprintf(&text, "%s\n\n", top)
			if path == r.Profile && !cum {
				h.res.Profiles = append(h.res.Profiles, profileResult{Run: r.Name, Round: r.Round, Path: path, Top: top})
			}
		}
		if err := os.WriteFile(path+".top.txt", []byte(text.String()), 0o644); err != nil {
			h.res.errorf("%s round %d profile: %v", r.Name, r.Round, err)
		}
	}
}

// pprofTop returns the first n lines of `go tool pprof -top` for the
// profile at path, sorted by flat (cum false) or cumulative time.
func pprofTop(ctx context.Context, goTool, binary, path string, n int, cum bool) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	args := []string{"tool", "pprof", "-top", fmt.Sprintf("-nodecount=%d", n)}
	if cum {
		args = append(args, "-cum")
	}
	args = append(args, binary, path)
	out, err := exec.CommandContext(ctx, goTool, args...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("go %s: %v: %s", strings.Join(args, " "), err, out)
	}
	return trimPprofHeader(string(out)), nil
}

// trimPprofHeader drops pprof's preamble (file, build id, type, time) but
// keeps its "Duration:" and "Showing nodes" lines and the table.
func trimPprofHeader(s string) string {
	var keep []string
	for _, line := range strings.Split(strings.TrimRight(s, "\n"), "\n") {
		switch {
		case strings.HasPrefix(line, "File:"), strings.HasPrefix(line, "Build ID:"),
			strings.HasPrefix(line, "Type:"), strings.HasPrefix(line, "Time:"):
			continue
		}
		keep = append(keep, line)
	}
	return strings.Join(keep, "\n")
}
