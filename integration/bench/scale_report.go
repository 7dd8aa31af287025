package main

import (
	"encoding/csv"
	"fmt"
	"image/color"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// The aims of a restart at scale, as BENCHMARKS.md states them.
const (
	aimReady10M  = 2 * time.Second
	aimReady100M = 20 * time.Second
	aimRSS100M   = 6 << 30
	// After kill -9: ready within what a clean restart takes, and the
	// same RSS bound.
	aimCrash10M  = 2 * time.Second
	aimCrash100M = 5 * time.Second
	aimGateBytes = 40.0 // per member
)

// scaleCSVHeader: each figure of the starts as its median, min and max over
// the runs. The crash path's columns come after the error, so that a CSV
// written before them (scaleCSVHeaderNoCrash) still reads.
var scaleCSVHeader = append(slices.Clone(scaleCSVHeaderNoCrash),
	"ready_crash_s", "ready_crash_min_s", "ready_crash_max_s",
	"restore_crash_s", "restore_crash_min_s", "restore_crash_max_s",
	"cpu_crash_s", "cpu_crash_min_s", "cpu_crash_max_s", "rss_crash_bytes",
	"commands_to_ready", "commands_to_ready_min", "commands_to_ready_max",
	"commands_again", "commands_again_min", "commands_again_max",
	"snapshot_write_running_s", "snapshot_write_running_min_s", "snapshot_write_running_max_s", "rss_killed_bytes")

// scaleCSVHeaderNoCrash are the columns of the CSVs written before the
// crash path.
var scaleCSVHeaderNoCrash = []string{"members", "gate_only", "runs",
	"ready_snapshot_s", "ready_snapshot_min_s", "ready_snapshot_max_s",
	"restore_snapshot_s", "restore_snapshot_min_s", "restore_snapshot_max_s",
	"cpu_snapshot_s", "cpu_snapshot_min_s", "cpu_snapshot_max_s", "rss_snapshot_bytes",
	"ready_scan_s", "ready_scan_min_s", "ready_scan_max_s",
	"restore_scan_s", "restore_scan_min_s", "restore_scan_max_s",
	"cpu_scan_s", "cpu_scan_min_s", "cpu_scan_max_s", "rss_scan_bytes",
	"snapshot_write_s", "snapshot_write_min_s", "snapshot_write_max_s",
	"gate_bytes", "gate_bytes_per_member", "lookups_per_s", "store_bytes", "snapshot_bytes", "build_s", "error"}

func writeScaleCSV(path string, rs []scaleResult) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	_ = w.Write(scaleCSVHeader)
	num := func(x float64, prec int) string {
		if math.IsNaN(x) {
			return ""
		}
		return strconv.FormatFloat(x, 'f', prec, 64)
	}
	three := func(s spread) []string {
		if s.N == 0 {
			return []string{"", "", ""} // not measured
		}
		return []string{num(s.Median, 3), num(s.Min, 3), num(s.Max, 3)}
	}
	for _, r := range rs {
		row := []string{strconv.Itoa(r.Members), strconv.FormatBool(r.GateOnly), strconv.Itoa(r.Runs)}
		row = append(row, three(r.ReadySnap)...)
		row = append(row, three(r.RestoreSnap)...)
		row = append(row, three(r.CPUSnap)...)
		row = append(row, strconv.FormatInt(r.RSSSnap, 10))
		row = append(row, three(r.ReadyScan)...)
		row = append(row, three(r.RestoreScan)...)
		row = append(row, three(r.CPUScan)...)
		row = append(row, strconv.FormatInt(r.RSSScan, 10))
		row = append(row, three(r.WriteSnap)...)
		row = append(row, strconv.FormatInt(r.GateBytes, 10), num(r.BytesPerMember(), 2), num(r.LookupsPerSecond(), 0),
			strconv.FormatInt(r.StoreBytes, 10), strconv.FormatInt(r.SnapBytes, 10), num(r.BuildTook.Seconds(), 3), r.Err)
		row = append(row, three(r.ReadyCrash)...)
		row = append(row, three(r.RestoreCrash)...)
		row = append(row, three(r.CPUCrash)...)
		row = append(row, strconv.FormatInt(r.RSSCrash, 10))
		row = append(row, three(r.Applied)...)
		row = append(row, three(r.Again)...)
		row = append(row, three(r.WriteRun)...)
		row = append(row, strconv.FormatInt(r.RSSKilled, 10))
		_ = w.Write(row)
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// readScaleCSV reads the rows writeScaleCSV wrote; a missing file has
// none.
func readScaleCSV(path string) ([]scaleResult, error) {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	rows, err := csv.NewReader(f).ReadAll()
	if err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("%s: no header", path)
	}
	header := strings.Join(rows[0], ",")
	crash := header == strings.Join(scaleCSVHeader, ",")
	if !crash && header != strings.Join(scaleCSVHeaderNoCrash, ",") {
		return nil, fmt.Errorf("%s: not the columns of this build", path)
	}
	var out []scaleResult
	for _, row := range rows[1:] {
		col := 0
		next := func() string { col++; return row[col-1] }
		num := func() float64 {
			v, err := strconv.ParseFloat(next(), 64)
			if err != nil {
				return math.NaN()
			}
			return v
		}
		r := scaleResult{}
		r.Members, r.GateOnly, r.Runs = int(num()), next() == "true", int(num())
		three := func() spread {
			s := spread{N: r.Runs, Median: num(), Min: num(), Max: num()}
			if math.IsNaN(s.Median) {
				return spread{} // not measured
			}
			return s
		}
		r.ReadySnap, r.RestoreSnap, r.CPUSnap, r.RSSSnap = three(), three(), three(), int64(num())
		r.ReadyScan, r.RestoreScan, r.CPUScan, r.RSSScan = three(), three(), three(), int64(num())
		r.WriteSnap = three()
		r.GateBytes = int64(num())
		num() // bytes per member, computed
		if lps := num(); lps > 0 {
			r.LookupNs = 1e9 / lps
		}
		r.StoreBytes, r.SnapBytes = int64(num()), int64(num())
		r.BuildTook = time.Duration(num() * float64(time.Second))
		r.Err = next()
		if crash { // else the crash path was not measured: its spreads stay empty
			r.ReadyCrash, r.RestoreCrash, r.CPUCrash, r.RSSCrash = three(), three(), three(), int64(num())
			r.Applied, r.Again, r.WriteRun, r.RSSKilled = three(), three(), three(), int64(num())
		}
		out = append(out, r)
	}
	return out, nil
}

// plotScale draws two panels side by side against members (log x): the
// time from process start to ready, from the snapshot and by the scan,
// with the aims; and the peak RSS of both, with the aim at 100M.
func plotScale(path string, rs []scaleResult) error {
	var ok []scaleResult
	for _, r := range rs {
		if r.Err == "" && r.ReadySnap.N > 0 {
			ok = append(ok, r)
		}
	}
	if len(ok) == 0 {
		return fmt.Errorf("no size measured")
	}
	series := func(f func(scaleResult) float64) plotter.XYs {
		var xy plotter.XYs
		for _, r := range ok {
			if y := f(r); y > 0 {
				xy = append(xy, plotter.XY{X: float64(r.Members), Y: y})
			}
		}
		return xy
	}
	// spreads is a figure's median with its min and max, for error bars.
	spreads := func(f func(scaleResult) spread) *minMaxXYs {
		var m minMaxXYs
		for _, r := range ok {
			if s := f(r); s.N > 0 && s.Median > 0 {
				m.XYs = append(m.XYs, plotter.XY{X: float64(r.Members), Y: s.Median})
				m.lo, m.hi = append(m.lo, s.Median-s.Min), append(m.hi, s.Max-s.Median)
			}
		}
		return &m
	}
	newPanel := func(title, ylabel string) *plot.Plot {
		p := plot.New()
		p.Title.Text = title
		p.X.Label.Text = "members"
		p.Y.Label.Text = ylabel
		p.X.Scale = plot.LogScale{}
		p.X.Tick.Marker = plot.LogTicks{Prec: -1}
		p.X.Min, p.X.Max = 5e5, 2e8
		p.Y.Min = 0
		p.Legend.Top, p.Legend.Left = true, true
		p.Add(plotter.NewGrid())
		return p
	}
	bars := func(p *plot.Plot, m *minMaxXYs, c color.Color) error {
		if len(m.XYs) == 0 {
			return nil
		}
		e, err := plotter.NewYErrorBars(m)
		if err != nil {
			return err
		}
		e.Color = c
		p.Add(e)
		return nil
	}
	line := func(p *plot.Plot, name string, xy plotter.XYs, c color.Color, dashed bool) error {
		if len(xy) == 0 {
			return nil
		}
		l, pts, err := plotter.NewLinePoints(xy)
		if err != nil {
			return err
		}
		l.Color, pts.Color = c, c
		if dashed {
			l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		}
		p.Add(l, pts)
		p.Legend.Add(name, l, pts)
		return nil
	}
	aims := func(p *plot.Plot, name string, xy plotter.XYs) error {
		s, err := plotter.NewScatter(xy)
		if err != nil {
			return err
		}
		s.Shape = draw.CrossGlyph{}
		s.Radius = vg.Points(5)
		s.Color = color.RGBA{R: 200, A: 255}
		p.Add(s)
		p.Legend.Add(name, s)
		return nil
	}
	blue, orange, green := color.RGBA{B: 200, G: 90, A: 255}, color.RGBA{R: 230, G: 120, A: 255}, color.RGBA{G: 150, A: 255}

	ready := newPanel("Restart to ready (process start → /readyz)", "seconds, log")
	ready.Y.Scale = plot.LogScale{}
	ready.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	ready.Y.Min, ready.Y.Max = 0.02, 3000
	ready.Legend.Top, ready.Legend.Left = false, false // bottom right, below the lines
	readySnap, readyScan := spreads(func(r scaleResult) spread { return r.ReadySnap }), spreads(func(r scaleResult) spread { return r.ReadyScan })
	if err := line(ready, "from the gate snapshot (median, min–max)", readySnap.XYs, blue, false); err != nil {
		return err
	}
	if err := bars(ready, readySnap, blue); err != nil {
		return err
	}
	if err := line(ready, "by the Pebble scan (median, min–max)", readyScan.XYs, orange, true); err != nil {
		return err
	}
	if err := bars(ready, readyScan, orange); err != nil {
		return err
	}
	readyCrash := spreads(func(r scaleResult) spread { return r.ReadyCrash })
	if err := line(ready, "after kill -9, from an older snapshot (median, min–max)", readyCrash.XYs, green, false); err != nil {
		return err
	}
	if err := bars(ready, readyCrash, green); err != nil {
		return err
	}
	if err := line(ready, "gate restore from the snapshot (log line)", series(func(r scaleResult) float64 { return r.RestoreSnap.Median }), color.Gray{Y: 90}, true); err != nil {
		return err
	}
	if err := aims(ready, "aim", plotter.XYs{{X: 1e7, Y: aimReady10M.Seconds()}, {X: 1e8, Y: aimReady100M.Seconds()}, {X: 1e8, Y: aimCrash100M.Seconds()}}); err != nil {
		return err
	}
	rss := newPanel("Peak RSS once ready", "GiB")
	gib := func(b int64) float64 { return float64(b) / (1 << 30) }
	if err := line(rss, "from the gate snapshot", series(func(r scaleResult) float64 { return gib(r.RSSSnap) }), blue, false); err != nil {
		return err
	}
	if err := line(rss, "by the Pebble scan", series(func(r scaleResult) float64 { return gib(r.RSSScan) }), orange, true); err != nil {
		return err
	}
	if err := line(rss, "after kill -9", series(func(r scaleResult) float64 { return gib(r.RSSCrash) }), green, false); err != nil {
		return err
	}
	if err := line(rss, "the process killed (load, snapshots written)", series(func(r scaleResult) float64 { return gib(r.RSSKilled) }), color.Gray{Y: 90}, true); err != nil {
		return err
	}
	if err := aims(rss, "aim", plotter.XYs{{X: 1e8, Y: gib(aimRSS100M)}}); err != nil {
		return err
	}

	img := vgimg.New(vg.Points(900), vg.Points(380))
	dc := draw.New(img)
	plots := [][]*plot.Plot{{ready, rss}}
	t := draw.Tiles{Rows: 1, Cols: 2, PadX: vg.Points(20), PadTop: vg.Points(8), PadBottom: vg.Points(8),
		PadLeft: vg.Points(8), PadRight: vg.Points(12)}
	canvases := plot.Align(plots, t, dc)
	ready.Draw(canvases[0][0])
	rss.Draw(canvases[0][1])
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// minMaxXYs are points with asymmetric error bars (plotter.YErrorer).
type minMaxXYs struct {
	plotter.XYs
	lo, hi []float64
}

func (m *minMaxXYs) YError(i int) (float64, float64) { return m.lo[i], m.hi[i] }

// scaleMarkdown is the section appended to BENCHMARKS.md: short, the
// table, the aims, and how it was measured.
func scaleMarkdown(o *scaleOptions, rs []scaleResult, started time.Time, took time.Duration, loadStart, loadEnd string) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	invoked := o.invokedAs
	if invoked == "" {
		invoked = "bench scale --sizes " + joinList(intStrings(o.sizes))
	}
	m := readMachine()
	w("## %s UTC: restart to ready, 1M to 100M members, clean and after kill -9\n\n", started.Format("2006-01-02 15:04"))
	w("- machine: %d cores, %s, %.0f GiB RAM, %s; %s at the start, %s at the end (shared: other sessions' builds and tests ran beside this one)\n",
		m.Cores, m.CPU, m.MemGiB, m.Go, loadStart, loadEnd)
	w("- command: `%s`; took %v; picture: [%s](%s), figures: [%s](%s)\n\n", invoked, took.Round(time.Second), o.png, o.png, o.csv, o.csv)
	w("| members | ready, snapshot | ready, scan | gate restore, snapshot | gate restore, scan | CPU s to ready snapshot / scan | peak RSS snapshot / scan | gate B/member | lookups/s | store + snapshot on disk | snapshot write |" +
		" ready after kill -9 | commands applied before ready (of which again) | CPU s / peak RSS after kill -9 (killed process) | snapshot write while running |\n")
	w("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	secs := func(s spread) string {
		return spreadText(s, func(x float64) string { return fmt.Sprintf("%.2f", x) }) + " s"
	}
	var scanned scaleResult // the largest size scanned, for the extrapolation
	for _, r := range rs {
		if r.Err != "" {
			w("| %s | failed: %s | | | | | | | | | | | | | |\n", thousands(float64(r.Members)), oneLine(r.Err))
			continue
		}
		readyScan, restoreScan, cpuScan, rssScan := secs(r.ReadyScan), secs(r.RestoreScan), fmt.Sprintf("%.1f", r.CPUScan.Median), mib(r.RSSScan)
		if r.GateOnly {
			readyScan, cpuScan, rssScan = "not run", "–", "–"
			restoreScan = "–"
			if scanned.Members > 0 {
				restoreScan = fmt.Sprintf("≈%.0f s (extrapolated)", scanned.RestoreScan.Median*float64(r.Members)/float64(scanned.Members))
			}
		} else {
			scanned = r
		}
		readyCrash, again, crashUse, writeRun := "not run", "–", "–", "–"
		if r.ReadyCrash.N > 0 {
			readyCrash = secs(r.ReadyCrash)
			again = spreadText(r.Applied, func(x float64) string { return thousands(x) }) + " (" +
				spreadText(r.Again, func(x float64) string { return thousands(x) }) + ")"
			crashUse = fmt.Sprintf("%.1f / %s (%s)", r.CPUCrash.Median, mib(r.RSSCrash), mib(r.RSSKilled))
		}
		if r.WriteRun.N > 0 {
			writeRun = secs(r.WriteRun)
		}
		w("| %s%s | %s | %s | %s | %s | %.1f / %s | %s / %s | %.1f | %s | %s + %s | %.2f s | %s | %s | %s | %s |\n",
			thousands(float64(r.Members)), map[bool]string{true: " (gate only)"}[r.GateOnly], secs(r.ReadySnap), readyScan,
			secs(r.RestoreSnap), restoreScan, r.CPUSnap.Median, cpuScan, mib(r.RSSSnap), rssScan,
			r.BytesPerMember(), thousands(r.LookupsPerSecond()), mib(r.StoreBytes), mib(r.SnapBytes), r.WriteSnap.Median,
			readyCrash, again, crashUse, writeRun)
	}
	w("\n| aim | measured | met |\n|---|---:|---|\n")
	for _, a := range scaleAims(rs) {
		w("| %s | %s | %s |\n", a[0], a[1], a[2])
	}
	switch {
	case o.scanRuns == 0:
		w("\nBy the scan: not started in this run where the size's snapshot existed (--scan-runs 0; with --merge its figures, and the snapshot write at stop, are the earlier run's).\n")
	case o.scanRuns > 0 && o.scanRuns != o.runs:
		w("\nBy the scan: %d start(s) per size measured in this run (--scan-runs).\n", o.scanRuns)
	}
	w("\nEach start figure is the median [min – max] of %d starts of each path per size (CPU s: the median). "+
		"Ready: process start of bin/processor (embedded broker, empty topics) to the first 200 of /readyz, polled every 10 ms: the gate restored, the topics checked, the group's assignment received and every partition caught up with its commands; restore: the processor's own `restored membership state ... took=` (the gate rebuilt, from the snapshot or by the scan). "+
		"Each scan run starts with no snapshot and writes one at its SIGTERM (snapshot write: the median); the snapshot runs load it. "+
		"Peak RSS: the processor's VmHWM once ready, the largest of the runs. Lookups: gate.Map.Allows in one goroutine over random keys of which one in ten is a member, on the gate loaded from the snapshot. "+
		"Stores: membership.Bulk, random user ids, one open leave and a processor-like note per member, page cache warm (written or read just before). "+
		"After kill -9 (the crash path, unless --crash=false): on a clone of the store (tables linked) with the snapshot of the clean stop, a processor with --gate-snapshot-interval %v under a load of %d leaves/s of new users; a random time up to that interval after a snapshot written while running it is killed with SIGKILL, the load still writing, and a new processor starts on the same data dir and broker log: ready, CPU s and peak RSS as above (in parentheses: the peak of the process killed, under the load and writing snapshots), "+
		"commands applied before ready: `cohortgate_commands_applied_total` once ready, those since the snapshot's label and those the process killed had not applied yet; of which again: the `commands=` of its `gate snapshot older than the store` line (at most: the label's offsets to the store's); its gate's members checked equal to the store's plus the leaves in the commands topic; the restart is the next run's killed process. "+
		"Snapshot write while running: `wrote gate snapshot while running ... took=`, every such write of the crash path (the commands wait for its `held=`, the gate's copy, alone). "+
		"Gate only: no store was built for that size (too slow on this machine); the harness built the gate of the same members, saved it labelled with an empty store's checkpoints, and the processor loaded it on an empty store: the snapshot path, measured; the scan, extrapolated linearly from the largest size scanned.\n", runsOf(rs), o.crashInterval, o.crashLoad)
	return b.String()
}

// scaleAims are the restart aims against the sizes measured.
func scaleAims(rs []scaleResult) [][3]string {
	var out [][3]string
	find := func(n int) (scaleResult, bool) {
		for _, r := range rs {
			if r.Members == n && r.Err == "" {
				return r, true
			}
		}
		return scaleResult{}, false
	}
	missing := func(aim string) { out = append(out, [3]string{aim, "not measured", "–"}) }
	if r, ok := find(10_000_000); ok {
		out = append(out, [3]string{"ready ≤ 2 s at 10M members (worst run)", fmt.Sprintf("%.2f s", r.ReadySnap.Max), yesNo(r.ReadySnap.Max <= aimReady10M.Seconds())})
	} else {
		missing("ready ≤ 2 s at 10M members (worst run)")
	}
	if r, ok := find(100_000_000); ok {
		out = append(out,
			[3]string{"ready ≤ 20 s at 100M members (worst run)", fmt.Sprintf("%.2f s", r.ReadySnap.Max), yesNo(r.ReadySnap.Max <= aimReady100M.Seconds())},
			[3]string{"peak RSS ≤ 6 GiB at 100M members", mib(r.RSSSnap), yesNo(r.RSSSnap <= aimRSS100M)})
	} else {
		missing("ready ≤ 20 s at 100M members (worst run)")
		missing("peak RSS ≤ 6 GiB at 100M members")
	}
	if r, ok := find(10_000_000); ok && r.ReadyCrash.N > 0 {
		out = append(out, [3]string{"after kill -9: ready ≤ 2 s at 10M members (worst run)", fmt.Sprintf("%.2f s", r.ReadyCrash.Max), yesNo(r.ReadyCrash.Max <= aimCrash10M.Seconds())})
	} else {
		missing("after kill -9: ready ≤ 2 s at 10M members (worst run)")
	}
	if r, ok := find(100_000_000); ok && r.ReadyCrash.N > 0 {
		peak := max(r.RSSCrash, r.RSSKilled)
		out = append(out,
			[3]string{"after kill -9: ready ≤ 5 s at 100M members (worst run)", fmt.Sprintf("%.2f s", r.ReadyCrash.Max), yesNo(r.ReadyCrash.Max <= aimCrash100M.Seconds())},
			[3]string{"after kill -9: peak RSS ≤ 6 GiB at 100M members (the restart, and the process killed)", mib(peak), yesNo(peak <= aimRSS100M)})
	} else {
		missing("after kill -9: ready ≤ 5 s at 100M members (worst run)")
		missing("after kill -9: peak RSS ≤ 6 GiB at 100M members (the restart, and the process killed)")
	}
	worst := 0.0
	for _, r := range rs {
		if r.Err == "" && r.GateBytes > 0 {
			worst = max(worst, r.BytesPerMember())
		}
	}
	if worst > 0 {
		out = append(out, [3]string{"gate ≤ 40 B/member (worst of the sizes)", fmt.Sprintf("%.1f", worst), yesNo(worst <= aimGateBytes)})
	}
	return out
}

// runsOf is the most runs of any size measured.
func runsOf(rs []scaleResult) int {
	n := 0
	for _, r := range rs {
		n = max(n, r.Runs)
	}
	return n
}

func intStrings(ns []int) []string {
	out := make([]string, len(ns))
	for i, n := range ns {
		out[i] = strconv.Itoa(n)
	}
	return out
}
