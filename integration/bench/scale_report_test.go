package main

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

// TestScaleCSVRoundTrip: what writeScaleCSV writes, readScaleCSV reads
// back (--merge and --phases plot rely on it): spreads in ms, and a
// gate-only row, whose scan was not run, with its scan empty.
func TestScaleCSVRoundTrip(t *testing.T) {
	rs := []scaleResult{
		{Members: 1_000_000, Runs: 3, BuildTook: 2 * time.Second,
			ReadyScan: spread{N: 3, Median: 1.5, Min: 1.25, Max: 2}, RestoreScan: spread{N: 3, Median: 1, Min: 0.75, Max: 1.5},
			CPUScan: spread{N: 3, Median: 1, Min: 0.5, Max: 1.5}, RSSScan: 200 << 20,
			ReadySnap: spread{N: 3, Median: 0.125, Min: 0.125, Max: 0.25}, RestoreSnap: spread{N: 3, Median: 0.063, Min: 0.062, Max: 0.125},
			CPUSnap: spread{N: 3, Median: 0.25, Min: 0.25, Max: 0.5}, RSSSnap: 60 << 20, WriteSnap: spread{N: 3, Median: 0.5, Min: 0.25, Max: 0.75},
			GateBytes: 35 << 20, LookupNs: 125, StoreBytes: 120 << 20, SnapBytes: 35 << 20,
			ReadyCrash: spread{N: 3, Median: 0.75, Min: 0.5, Max: 1}, RestoreCrash: spread{N: 3, Median: 0.063, Min: 0.062, Max: 0.125},
			CPUCrash: spread{N: 3, Median: 0.25, Min: 0.25, Max: 0.5}, RSSCrash: 130 << 20, RSSKilled: 150 << 20,
			Applied: spread{N: 3, Median: 8445, Min: 6851, Max: 9000}, Again: spread{N: 3, Median: 336, Min: 100, Max: 9881}, WriteRun: spread{N: 3, Median: 0.125, Min: 0.062, Max: 0.25}},
		{Members: 100_000_000, Runs: 3, GateOnly: true,
			ReadySnap: spread{N: 3, Median: 8, Min: 7.5, Max: 9}, RestoreSnap: spread{N: 3, Median: 6, Min: 5.5, Max: 7},
			CPUSnap: spread{N: 3, Median: 4, Min: 3.5, Max: 4.5}, RSSSnap: 2 << 30, WriteSnap: spread{N: 3, Median: 12, Min: 11, Max: 13},
			GateBytes: 2 << 30, LookupNs: 500, SnapBytes: 2 << 30, Err: "something, with a comma"},
	}
	path := filepath.Join(t.TempDir(), "scale.csv")
	if err := writeScaleCSV(path, rs); err != nil {
		t.Fatal(err)
	}
	got, err := readScaleCSV(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(rs) {
		t.Fatalf("read %d rows; want %d", len(got), len(rs))
	}
	for i := range rs {
		if !reflect.DeepEqual(got[i], rs[i]) {
			t.Errorf("row %d:\n got %+v\nwant %+v", i, got[i], rs[i])
		}
	}
}

// TestScaleCSVWithoutCrash: a CSV written before the crash path (its
// columns end at the error) still reads, for --merge and --phases plot,
// with the crash path not measured; and a row written now without the
// crash path (--crash=false) reads back so.
func TestScaleCSVWithoutCrash(t *testing.T) {
	dir := t.TempDir()
	old := filepath.Join(dir, "old.csv")
	body := strings.Join(scaleCSVHeaderNoCrash, ",") + "\n" +
		"10000000,false,3,1.320,0.770,1.330,0.990,0.650,1.070,0.300,0.200,0.400,317718528," +
		"23.870,20.180,25.480,23.820,20.120,25.400,11.500,10.000,12.000,676331520," +
		"0.390,0.380,0.400,298844160,28.50,13863288,717225984,285212672,0.000,\n"
	if err := os.WriteFile(old, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	got, err := readScaleCSV(old)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 {
		t.Fatalf("read %d rows; want 1", len(got))
	}
	r := got[0]
	if r.Members != 10_000_000 || r.ReadySnap.Max != 1.33 || r.ReadyScan.Median != 23.87 || r.WriteSnap.Median != 0.39 || r.SnapBytes != 285212672 {
		t.Errorf("the old columns read as %+v", r)
	}
	if r.ReadyCrash.N != 0 || r.Applied.N != 0 || r.Again.N != 0 || r.WriteRun.N != 0 || r.RSSCrash != 0 || r.RSSKilled != 0 {
		t.Errorf("an old row has crash figures: %+v", r)
	}

	now := filepath.Join(dir, "now.csv")
	r.Err = ""
	if err := writeScaleCSV(now, []scaleResult{r}); err != nil {
		t.Fatal(err)
	}
	back, err := readScaleCSV(now)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, []scaleResult{r}) {
		t.Errorf("a row without the crash path:\n got %+v\nwant %+v", back, []scaleResult{r})
	}

	other := filepath.Join(dir, "other.csv")
	if err := os.WriteFile(other, []byte("members,runs\n1,2\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := readScaleCSV(other); err == nil {
		t.Error("a CSV of other columns read without an error")
	}
}

// TestScaleMarkdownCrash: the table has a cell for every column in every
// row, the crash path's figures among them, and the aims of a restart
// after kill -9 are judged on the worst run and on the larger of the two
// peaks (the restart's and the killed process's).
func TestScaleMarkdownCrash(t *testing.T) {
	s := func(med, lo, hi float64) spread { return spread{N: 3, Median: med, Min: lo, Max: hi} }
	rs := []scaleResult{
		{Members: 10_000_000, Runs: 3, ReadySnap: s(1, 0.8, 1.2), ReadyScan: s(20, 19, 21), ReadyCrash: s(1.5, 1.2, 2.5),
			Applied: s(9000, 7000, 11000), Again: s(300, 100, 500), WriteRun: s(0.4, 0.3, 0.5), RSSCrash: 400 << 20, RSSKilled: 500 << 20, GateBytes: 280 << 20},
		{Members: 100_000_000, Runs: 3, ReadySnap: s(3, 2.5, 3.5), ReadyScan: s(210, 200, 220), ReadyCrash: s(4, 3.5, 4.5),
			Applied: s(20000, 15000, 25000), Again: s(3000, 1000, 5000), WriteRun: s(6, 5, 7), RSSCrash: 3 << 30, RSSKilled: 7 << 30, GateBytes: 2 << 30},
		{Members: 30_000_000, Runs: 3, Err: "crash: something | odd"},
	}
	o := &scaleOptions{sizes: []int{10_000_000, 100_000_000}, png: "p.png", csv: "c.csv", crashInterval: 5 * time.Second, crashLoad: 2000}
	md := scaleMarkdown(o, rs, time.Date(2026, 12, 7, 6, 0, 0, 0, time.UTC), time.Minute, "1", "2")
	var table []string
	for _, l := range strings.Split(md, "\n") {
		if strings.HasPrefix(l, "| members") || strings.HasPrefix(l, "|---:") || strings.HasPrefix(l, "| 10,000,000") ||
			strings.HasPrefix(l, "| 100,000,000") || strings.HasPrefix(l, "| 30,000,000") {
			table = append(table, l)
		}
	}
	if len(table) != 5 {
		t.Fatalf("table lines %d; want 5:\n%s", len(table), md)
	}
	cells := func(l string) int { return strings.Count(strings.ReplaceAll(l, `\|`, ""), "|") }
	for _, l := range table[1:] {
		if cells(l) != cells(table[0]) {
			t.Errorf("%d cells; the header has %d:\n%s\n%s", cells(l)-1, cells(table[0])-1, table[0], l)
		}
	}
	for _, want := range []string{"ready after kill -9", "1.50 [1.20 – 2.50] s", "9,000 [7,000 – 11,000] (300 [100 – 500])", "6.00 [5.00 – 7.00] s", "(500 MiB)"} {
		if !strings.Contains(md, want) {
			t.Errorf("the section lacks %q:\n%s", want, md)
		}
	}
	aims := map[string][2]string{}
	for _, a := range scaleAims(rs) {
		aims[a[0]] = [2]string{a[1], a[2]}
	}
	for aim, want := range map[string][2]string{
		"after kill -9: ready ≤ 2 s at 10M members (worst run)":                                 {"2.50 s", "no"},
		"after kill -9: ready ≤ 5 s at 100M members (worst run)":                                {"4.50 s", "yes"},
		"after kill -9: peak RSS ≤ 6 GiB at 100M members (the restart, and the process killed)": {mib(7 << 30), "no"},
	} {
		if got := aims[aim]; got != want {
			t.Errorf("%s: %v; want %v", aim, got, want)
		}
	}
}
