package main

import (
	"path/filepath"
	"reflect"
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
			GateBytes: 35 << 20, LookupNs: 125, StoreBytes: 120 << 20, SnapBytes: 35 << 20},
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
