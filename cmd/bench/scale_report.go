package main

import (
	"encoding/csv"
	"fmt"
	"image/color"
	"os"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// The aims of issue 16 §2.
const (
	aimReady10M  = 2 * time.Second
	aimReady100M = 20 * time.Second
	aimRSS100M   = 6 << 30
	aimGateBytes = 40.0 // per member
)

var scaleCSVHeader = []string{"members", "gate_only", "ready_snapshot_s", "restore_snapshot_s", "cpu_snapshot_s", "rss_snapshot_bytes",
	"ready_scan_s", "restore_scan_s", "cpu_scan_s", "rss_scan_bytes", "snapshot_write_s", "gate_bytes", "gate_bytes_per_member",
	"lookups_per_s", "store_bytes", "snapshot_bytes", "build_s", "error"}

func writeScaleCSV(path string, rs []scaleResult) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	_ = w.Write(scaleCSVHeader)
	sec := func(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', 3, 64) }
	for _, r := range rs {
		_ = w.Write([]string{strconv.Itoa(r.Members), strconv.FormatBool(r.GateOnly), sec(r.ReadySnap), sec(r.RestoreSnap),
			strconv.FormatFloat(r.CPUSnap, 'f', 2, 64), strconv.FormatInt(r.RSSSnap, 10),
			sec(r.ReadyScan), sec(r.RestoreScan), strconv.FormatFloat(r.CPUScan, 'f', 2, 64), strconv.FormatInt(r.RSSScan, 10), sec(r.WriteSnap),
			strconv.FormatInt(r.GateBytes, 10), strconv.FormatFloat(r.BytesPerMember(), 'f', 2, 64),
			strconv.FormatFloat(r.LookupsPerSecond(), 'f', 0, 64), strconv.FormatInt(r.StoreBytes, 10),
			strconv.FormatInt(r.SnapBytes, 10), sec(r.BuildTook), r.Err})
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
	if len(rows) == 0 || strings.Join(rows[0], ",") != strings.Join(scaleCSVHeader, ",") {
		return nil, fmt.Errorf("%s: not the columns of this build", path)
	}
	var out []scaleResult
	for _, row := range rows[1:] {
		num := func(i int) float64 { v, _ := strconv.ParseFloat(row[i], 64); return v }
		d := func(i int) time.Duration { return time.Duration(num(i) * float64(time.Second)) }
		r := scaleResult{Members: int(num(0)), GateOnly: row[1] == "true", ReadySnap: d(2), RestoreSnap: d(3),
			CPUSnap: num(4), RSSSnap: int64(num(5)), ReadyScan: d(6), RestoreScan: d(7), CPUScan: num(8),
			RSSScan: int64(num(9)), WriteSnap: d(10), GateBytes: int64(num(11)), StoreBytes: int64(num(14)),
			SnapBytes: int64(num(15)), BuildTook: d(16), Err: row[17]}
		if lps := num(13); lps > 0 {
			r.LookupNs = 1e9 / lps
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
		if r.Err == "" && r.ReadySnap > 0 {
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
	blue, orange := color.RGBA{B: 200, G: 90, A: 255}, color.RGBA{R: 230, G: 120, A: 255}

	ready := newPanel("Restart to ready", "seconds (process start → /readyz), log")
	ready.Y.Scale = plot.LogScale{}
	ready.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	ready.Y.Min, ready.Y.Max = 0.1, 3000
	if err := line(ready, "from the gate snapshot", series(func(r scaleResult) float64 { return r.ReadySnap.Seconds() }), blue, false); err != nil {
		return err
	}
	if err := line(ready, "by the Pebble scan", series(func(r scaleResult) float64 { return r.ReadyScan.Seconds() }), orange, true); err != nil {
		return err
	}
	if err := line(ready, "gate restore from the snapshot (log line)", series(func(r scaleResult) float64 { return r.RestoreSnap.Seconds() }), color.Gray{Y: 90}, true); err != nil {
		return err
	}
	if err := aims(ready, "aim", plotter.XYs{{X: 1e7, Y: aimReady10M.Seconds()}, {X: 1e8, Y: aimReady100M.Seconds()}}); err != nil {
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
	w("## %s UTC: restart to ready, 1M to 100M members (issue 16 §2)\n\n", started.Format("2006-01-02 15:04"))
	w("- machine: %d cores, %s, %.0f GiB RAM, %s; %s at the start, %s at the end (shared: other sessions' builds and tests ran beside this one)\n",
		m.Cores, m.CPU, m.MemGiB, m.Go, loadStart, loadEnd)
	w("- command: `%s`; took %v; picture: [%s](%s), figures: [%s](%s)\n\n", invoked, took.Round(time.Second), o.png, o.png, o.csv, o.csv)
	w("| members | ready, snapshot | ready, scan | gate restore snapshot / scan | CPU s to ready snapshot / scan | peak RSS snapshot / scan | gate B/member | lookups/s | store + snapshot on disk | snapshot write |\n")
	w("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	var scanned scaleResult // the largest size scanned, for the extrapolation
	for _, r := range rs {
		if r.Err != "" {
			w("| %s | failed: %s | | | | | | | | |\n", thousands(float64(r.Members)), oneLine(r.Err))
			continue
		}
		readyScan, restoreScan, cpuScan, rssScan := fmt.Sprintf("%.2f s", r.ReadyScan.Seconds()),
			fmt.Sprintf("%.2f", r.RestoreScan.Seconds()), fmt.Sprintf("%.1f", r.CPUScan), mib(r.RSSScan)
		if r.GateOnly {
			readyScan, cpuScan, rssScan = "not run", "–", "–"
			restoreScan = "–"
			if scanned.Members > 0 {
				restoreScan = fmt.Sprintf("≈%.0f (extrapolated)", scanned.RestoreScan.Seconds()*float64(r.Members)/float64(scanned.Members))
			}
		} else {
			scanned = r
		}
		w("| %s%s | %.2f s | %s | %.2f / %s s | %.1f / %s | %s / %s | %.1f | %s | %s + %s | %.2f s |\n",
			thousands(float64(r.Members)), map[bool]string{true: " (gate only)"}[r.GateOnly], r.ReadySnap.Seconds(), readyScan,
			r.RestoreSnap.Seconds(), restoreScan, r.CPUSnap, cpuScan, mib(r.RSSSnap), rssScan,
			r.BytesPerMember(), thousands(r.LookupsPerSecond()), mib(r.StoreBytes), mib(r.SnapBytes), r.WriteSnap.Seconds())
	}
	w("\n| aim | measured | met |\n|---|---:|---|\n")
	for _, a := range scaleAims(rs) {
		w("| %s | %s | %s |\n", a[0], a[1], a[2])
	}
	w("\nReady: process start of bin/processor (embedded broker, empty topics) to the first 200 of /readyz, polled every 10 ms; restore: the processor's own `restored membership state ... took=` (the gate rebuilt, from the snapshot or by the scan). " +
		"The scan run starts with no snapshot and writes one at its SIGTERM (snapshot write); the snapshot run loads it. " +
		"Peak RSS: the processor's VmHWM once ready. Lookups: gate.Map.Allows in one goroutine over random keys of which one in ten is a member, on the gate loaded from the snapshot. " +
		"Stores: membership.Bulk, random user ids, one open leave and a processor-like note per member, page cache warm (written or read just before). " +
		"Gate only: no store was built for that size (too slow on this machine); the harness built the gate of the same members, saved it labelled with an empty store's checkpoints, and the processor loaded it on an empty store: the snapshot path, measured; the scan, extrapolated linearly from the largest size scanned.\n")
	return b.String()
}

// scaleAims are the aims of issue 16 §2 against the sizes measured.
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
		out = append(out, [3]string{"ready ≤ 2 s at 10M members", fmt.Sprintf("%.2f s", r.ReadySnap.Seconds()), yesNo(r.ReadySnap <= aimReady10M)})
	} else {
		missing("ready ≤ 2 s at 10M members")
	}
	if r, ok := find(100_000_000); ok {
		out = append(out,
			[3]string{"ready ≤ 20 s at 100M members", fmt.Sprintf("%.2f s", r.ReadySnap.Seconds()), yesNo(r.ReadySnap <= aimReady100M)},
			[3]string{"peak RSS ≤ 6 GiB at 100M members", mib(r.RSSSnap), yesNo(r.RSSSnap <= aimRSS100M)})
	} else {
		missing("ready ≤ 20 s at 100M members")
		missing("peak RSS ≤ 6 GiB at 100M members")
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

func intStrings(ns []int) []string {
	out := make([]string, len(ns))
	for i, n := range ns {
		out[i] = strconv.Itoa(n)
	}
	return out
}
