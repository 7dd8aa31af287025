package main

import (
	"context"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"time"

	"github.com/cohortgate/cohortgate/topics"
)

// restoreResult is the processor's start-up restore of a store of Members
// members, each Left with one open episode and a note, as the processor
// leaves a user after one leave. Took is the processor's own figure (its
// log line "restored membership state ... took=": Pebble scan, decoding
// and gate inserts), on a warm page cache (the store was just written or
// read).
type restoreResult struct {
	Members    int
	Restored   int
	Took       time.Duration
	PeakRSS    int64 // the processor's VmHWM just after the restore
	StoreBytes int64
	Err        string
}

// Rate is members restored per second.
func (r restoreResult) Rate() float64 { return ratio(float64(r.Restored), r.Took.Seconds()) }

// restorePhase builds (or reuses) a store per --restore-sizes and starts
// the processor over the data dir holding it, with empty topics of its
// own. The largest restore is profiled from the process start.
func (h *harness) restorePhase(ctx context.Context) {
	set := h.topicSet("restore")
	if err := h.createTopics(ctx, set, int32(h.o.partitions)); err != nil {
		h.res.errorf("restore: %v", err)
		return
	}
	largest := slices.Max(h.o.restoreSizes)
	for _, n := range h.o.restoreSizes {
		if ctx.Err() != nil {
			return
		}
		r := h.restore(ctx, n, set, n == largest)
		if r.Err != "" {
			h.res.errorf("restore %d: %s", n, r.Err)
			h.printf("restore: %d members: FAILED: %s", n, r.Err)
		}
		h.res.Restores = append(h.res.Restores, r)
	}
}

// restore starts a processor over the store of n members and reads its
// restore line; profile takes a CPU profile from the process start.
func (h *harness) restore(ctx context.Context, n int, set topics.Set, profile bool) restoreResult {
	r := restoreResult{Members: n}
	dir := filepath.Join(h.o.workDir, "stores", "members-"+strconv.Itoa(n))
	build, err := buildBulkStore(ctx, dir, n, func(done int) {
		h.printf("restore: building a store of %d members: %d written", n, done)
	})
	if err != nil {
		r.Err = err.Error()
		return r
	}
	r.StoreBytes = dirSize(filepath.Join(dir, "membership"))
	h.printf("restore: store of %d members (%s on disk, built in %.1fs; 0 = from the cache); starting the processor",
		n, mib(r.StoreBytes), build.Seconds())

	addr, err := freeAddr()
	if err != nil {
		r.Err = err.Error()
		return r
	}
	restored, onLine := watchLine(restoredLine)
	name := "restore-" + strconv.Itoa(n)
	args := h.processorArgs(h.topic(name+".group"), dir, addr, set, "--pprof")
	c, err := h.procs.start(name, h.logPath(name), onLine, h.o.processor, args...)
	if err != nil {
		r.Err = err.Error()
		return r
	}
	defer c.stop(10 * time.Second)
	var prof profileJob
	if profile && h.o.profileFor > 0 {
		prof = h.startProfile(ctx, name, "profile", "http://"+addr, 200*time.Millisecond)
	}
	t := time.NewTimer(10 * time.Minute)
	defer t.Stop()
	var line string
	select {
	case line = <-restored:
	case <-c.done:
		select {
		case line = <-restored:
		default:
			r.Err = c.failure().Error()
			return r
		}
	case <-t.C:
		r.Err = "no restore line within 10m"
		return r
	case <-ctx.Done():
		r.Err = ctx.Err().Error()
		return r
	}
	if rss, err := procPeakRSS(c.pid()); err == nil {
		r.PeakRSS = rss
	}
	if r.Restored, r.Took, err = parseRestoreLine(line); err != nil {
		r.Err = err.Error()
		return r
	}
	h.addProfile(ctx, throughputResult{Name: name, binary: h.o.processor, Profile: prof.wait(h)})
	h.printf("restore: %d members in %v: %s members/s, peak RSS %s", r.Restored, r.Took, thousands(r.Rate()), mib(r.PeakRSS))
	return r
}

// restoredLine matches the processor's log line after its restore.
var restoredLine = regexp.MustCompile(`msg="restored membership state"`)

// parseRestoreLine reads members= and took= from the processor's
// "restored membership state" log line (text format).
func parseRestoreLine(line string) (members int, took time.Duration, err error) {
	m := regexp.MustCompile(`\bmembers=(\d+)\b.*\btook=(\S+)`).FindStringSubmatch(line)
	if m == nil {
		return 0, 0, fmt.Errorf("no members= and took= in %q", line)
	}
	if members, err = strconv.Atoi(m[1]); err != nil {
		return 0, 0, err
	}
	took, err = time.ParseDuration(m[2])
	return members, took, err
}

// memberIDs returns n distinct random user ids (never 0), seeded by n, in
// ascending order.
func memberIDs(n int) []uint64 {
	rng := rand.New(rand.NewPCG(uint64(n), 0x5eed))
	ids := make([]uint64, 0, n)
	for len(ids) < n { // duplicates among 2^64 are rare: one or two rounds
		for range n - len(ids) {
			if id := rng.Uint64(); id != 0 {
				ids = append(ids, id)
			}
		}
		slices.Sort(ids)
		ids = slices.Compact(ids)
	}
	return ids
}

// dirSize is the total size of the regular files under dir.
func dirSize(dir string) int64 {
	var total int64
	_ = filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if info, err := d.Info(); err == nil && info.Mode().IsRegular() {
			total += info.Size()
		}
		return nil
	})
	return total
}
