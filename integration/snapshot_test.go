package integration

import (
	"io"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/cohortgate/cohortgate/pkg/fanout"
	"github.com/cohortgate/cohortgate/topics"
)

// restarts records a processor's Restored and SnapshotSaved events.
type restarts struct {
	mu       sync.Mutex
	restored []fanout.RestoredInfo
	saved    []fanout.SnapshotInfo
}

func (r *restarts) listen(cfg *fanout.Config) {
	cfg.EventListener.Restored = func(i fanout.RestoredInfo) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.restored = append(r.restored, i)
	}
	cfg.EventListener.SnapshotSaved = func(i fanout.SnapshotInfo) {
		r.mu.Lock()
		defer r.mu.Unlock()
		r.saved = append(r.saved, i)
	}
}

func (r *restarts) source(t *testing.T) string {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.restored) != 1 {
		t.Fatalf("%d Restored events, want 1", len(r.restored))
	}
	return r.restored[0].Source
}

// TestRestartFromGateSnapshot: after leaves and rejoins, a clean stop
// writes the gate snapshot; signals arrive while the processor is down.
// Restarted from the snapshot, and restarted on a copy of the same store
// with no snapshot (the store scan), the processor forwards the same
// signals, those the episodes allow.
func TestRestartFromGateSnapshot(t *testing.T) {
	e := newEnv(t, 2)
	dir := t.TempDir()
	cfg := e.config()
	cfg.GateSnapshot = filepath.Join(t.TempDir(), "gate.snapshot")
	var firstEv restarts
	firstCfg := cfg
	firstEv.listen(&firstCfg)
	first := e.start(dir, firstCfg)
	first.waitReady(t, 2)

	// 51 left; 52 left and came back; 53 left, came back and left again;
	// 54 never left. Several users, so that both partitions hold some.
	t0 := base()
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	e.command(topics.Leave, 51, at(1))
	e.command(topics.Leave, 52, at(1))
	e.command(topics.Rejoin, 52, at(3))
	e.command(topics.Leave, 53, at(1))
	e.command(topics.Rejoin, 53, at(2))
	e.command(topics.Leave, 53, at(4))
	waitApplied(t, "left", 0, []uint64{51}, first)
	waitApplied(t, "active", 1, []uint64{52}, first)
	waitApplied(t, "left", 1, []uint64{53}, first)
	if err := first.stop(t); err != nil {
		t.Fatalf("first run: %v", err)
	}
	firstEv.mu.Lock()
	saved := slices.Clone(firstEv.saved)
	firstEv.mu.Unlock()
	if len(saved) != 1 || saved[0].Err != nil || saved[0].Members != 3 {
		t.Fatalf("snapshot at the first stop: %+v, want one of 3 members", saved)
	}
	if got := firstEv.source(t); got != "scan" {
		t.Fatalf("the first start restored from the %s, want the scan (no snapshot yet)", got)
	}
	scanDir := t.TempDir()
	copyDir(t, dir, scanDir)

	var sigs []sig
	for _, u := range []uint64{51, 52, 53, 54} {
		for _, s := range []float64{0.5, 1, 1.5, 2.5, 3, 3.5, 4.5} {
			d := time.Duration(s * float64(time.Second))
			var out bool
			switch u {
			case 51:
				out = s >= 1
			case 52:
				out = s >= 1 && s < 3
			case 53:
				out = (s >= 1 && s < 2) || s >= 4
			}
			sigs = append(sigs, sig{u, d, !out})
		}
	}
	want := e.produceSignals(t0, sigs)

	var snapEv restarts
	snapCfg := cfg
	snapEv.listen(&snapCfg)
	second := e.start(dir, snapCfg)
	second.waitReady(t, 2)
	e.waitDecided()
	if got := snapEv.source(t); got != "snapshot" {
		t.Fatalf("the restart restored from the %s, want the snapshot", got)
	}
	if got := e.forwardedValues(); !slices.Equal(got, want) {
		t.Fatalf("restarted from the snapshot, forwarded %v, want %v", got, want)
	}
	if err := second.stop(t); err != nil {
		t.Fatalf("second run: %v", err)
	}

	// The same store as at the first stop, no snapshot: a new group reads
	// the same signals from the start.
	var scanEv restarts
	scanCfg := cfg
	scanCfg.Group = e.group + "-scan"
	scanCfg.TransactionalID = "it-" + randomID()
	scanCfg.GateSnapshot = filepath.Join(t.TempDir(), "gate.snapshot")
	scanEv.listen(&scanCfg)
	third := e.start(scanDir, scanCfg)
	third.waitReady(t, 2)
	e.waitDecidedBy(scanCfg.Group)
	if got := scanEv.source(t); got != "scan" {
		t.Fatalf("the restart without a snapshot restored from the %s, want the scan", got)
	}
	var twice []string
	for _, v := range want {
		twice = append(twice, v, v)
	}
	if got := e.forwardedValues(); !slices.Equal(got, twice) {
		t.Fatalf("after the restart by the scan, the cohort topic holds %v, want each of %v twice", got, want)
	}
}

// copyDir copies the regular files of src, a closed Pebble store, into
// dst.
func copyDir(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		target := filepath.Join(dst, rel)
		if d.IsDir() {
			return os.MkdirAll(target, 0o755)
		}
		in, err := os.Open(path)
		if err != nil {
			return err
		}
		defer in.Close()
		out, err := os.Create(target)
		if err != nil {
			return err
		}
		if _, err := io.Copy(out, in); err != nil {
			out.Close()
			return err
		}
		return out.Close()
	})
	if err != nil {
		t.Fatal(err)
	}
}
