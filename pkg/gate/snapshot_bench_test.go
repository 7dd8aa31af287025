package gate

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// BenchmarkSnapshot saves and loads Maps of 10M and 30M members, in
// memory: one open episode each, and a history of two episodes (one
// closed, one open) for one member in 16.
//
//	go test -run '^$' -bench Snapshot -benchtime 3x -cpu 1,2 ./pkg/gate
//
// op=save reports Save's wall time to io.Discard (save-ms: the encoding
// and checksum, no disk) and the longest a Set made
// meanwhile waited (set-wait-ms): a goroutine sets one member again every
// 100µs while Save runs, so set-wait-ms is how long Save kept the writers
// out. op=load reports Load's wall time (load-ms) at the -cpu given, and
// the process's CPU time meanwhile (load-cpu-ms), which a shared machine
// disturbs less.
//
// With GATE_BENCH_FIXTURES set to a directory, the snapshot of each size
// is kept there and later runs load it instead of building the Map again
// (minutes at 30M on a loaded machine).
func BenchmarkSnapshot(b *testing.B) {
	b.Logf("load average: %s", loadAverage())
	for _, size := range []struct {
		name string
		n    int
	}{{"10M", 10_000_000}, {"30M", 30_000_000}} {
		b.Run("members="+size.name, func(b *testing.B) {
			m, snap := snapshotFixture(b, size.n)
			b.Run("op=save", func(b *testing.B) {
				var save, wait time.Duration
				for range b.N {
					s, w := saveWhileSetting(b, m, io.Discard)
					save, wait = save+s, max(wait, w)
				}
				b.ReportMetric(float64(save.Milliseconds())/float64(b.N), "save-ms")
				b.ReportMetric(float64(wait.Microseconds())/1000, "set-wait-ms")
			})
			b.Run("op=load", func(b *testing.B) {
				var elapsed, cpu time.Duration
				for range b.N {
					b.StopTimer()
					got := New()
					runtime.GC()
					b.StartTimer()
					start, cpu0 := time.Now(), cpuTime()
					if err := got.Load(bytes.NewReader(snap), int64(len(snap)), nil); err != nil {
						b.Fatal(err)
					}
					elapsed += time.Since(start)
					cpu += cpuTime() - cpu0
					b.StopTimer()
					if got.Len() != size.n {
						b.Fatalf("loaded %d members, saved %d", got.Len(), size.n)
					}
					b.StartTimer()
				}
				b.ReportMetric(float64(elapsed.Milliseconds())/float64(b.N), "load-ms")
				b.ReportMetric(float64(cpu.Milliseconds())/float64(b.N), "load-cpu-ms")
			})
		})
	}
}

// saveWhileSetting saves m into w while another goroutine sets a member
// every 100µs, and returns Save's wall time and the longest Set.
func saveWhileSetting(b *testing.B, m *Map, w io.Writer) (save, longest time.Duration) {
	const user = 1 // not a member of the fixture (ids are random)
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		eps := []Episode{{benchBaseNs, OpenEnd}}
		for i := uint64(0); ; i++ {
			select {
			case <-done:
				return
			default:
			}
			eps[0].LeftAtNs = benchBaseNs + i
			start := time.Now()
			if err := m.Set(user, eps); err != nil {
				panic(err)
			}
			longest = max(longest, time.Since(start))
			time.Sleep(100 * time.Microsecond)
		}
	}()
	start := time.Now()
	_, err := m.Save(w, []byte("bench"))
	save = time.Since(start)
	close(done)
	wg.Wait()
	if err != nil {
		b.Fatal(err)
	}
	return save, longest
}

var snapFixture struct {
	n    int
	m    *Map
	snap []byte
}

// snapshotFixture returns a Map of n members and its snapshot, built once
// per n; the previous size's are dropped first.
func snapshotFixture(b *testing.B, n int) (*Map, []byte) {
	if snapFixture.n == n {
		return snapFixture.m, snapFixture.snap
	}
	snapFixture.m, snapFixture.snap = nil, nil
	runtime.GC()
	start := time.Now()
	var path string
	if dir := os.Getenv("GATE_BENCH_FIXTURES"); dir != "" {
		path = filepath.Join(dir, fmt.Sprintf("gate-bench-%d.snapshot", n))
		if snap, err := os.ReadFile(path); err == nil {
			m := New()
			if err := m.Load(bytes.NewReader(snap), int64(len(snap)), nil); err != nil {
				b.Fatalf("%s: %v", path, err)
			}
			b.Logf("%d members and their snapshot read from %s in %v", n, path, time.Since(start).Round(time.Millisecond))
			snapFixture.n, snapFixture.m, snapFixture.snap = n, m, snap
			return m, snap
		}
	}
	m := New(Capacity(n))
	ids := memberIDs(n)
	one, two := make([]Episode, 1), make([]Episode, 2)
	for i, id := range ids {
		eps := one
		eps[0] = Episode{leftAt(id), OpenEnd}
		if i%16 == 0 {
			eps = two
			eps[0] = Episode{benchBaseNs - 2000, benchBaseNs - 1000}
			eps[1] = Episode{leftAt(id), OpenEnd}
		}
		if err := m.Set(id, eps); err != nil {
			b.Fatal(err)
		}
	}
	var buf bytes.Buffer
	buf.Grow(int(m.MemoryBytes()) + 1<<20)
	if _, err := m.Save(&buf, []byte("bench")); err != nil {
		b.Fatal(err)
	}
	b.Logf("%d members (%d MiB of table) and their snapshot (%d MiB) built in %v",
		n, m.MemoryBytes()>>20, buf.Len()>>20, time.Since(start).Round(time.Millisecond))
	snapFixture.n, snapFixture.m, snapFixture.snap = n, m, buf.Bytes()
	if path != "" {
		if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
			b.Fatal(err)
		}
	}
	benchMu.Lock()
	delete(benchIDs, n) // the ids are not needed again
	benchMu.Unlock()
	return m, buf.Bytes()
}

func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}

// BenchmarkSnapshotCopy measures what a processor's snapshot written while
// running costs its commands: PrepareSnapshot faulting in the copy's
// memory (prepare-ms; off the commands' goroutine), then Snapshot copying
// the table into it (copy-ms; the commands wait for it), on the fixtures
// of BenchmarkSnapshot.
//
//	go test -run '^$' -bench SnapshotCopy -benchtime 3x ./pkg/gate
func BenchmarkSnapshotCopy(b *testing.B) {
	b.Logf("load average: %s", loadAverage())
	for _, size := range []struct {
		name string
		n    int
	}{{"10M", 10_000_000}, {"30M", 30_000_000}} {
		b.Run("members="+size.name, func(b *testing.B) {
			m, _ := snapshotFixture(b, size.n)
			var prepare, cp time.Duration
			for range b.N {
				start := time.Now()
				m.PrepareSnapshot()
				mid := time.Now()
				s := m.Snapshot()
				prepare, cp = prepare+mid.Sub(start), cp+time.Since(mid)
				s.Release()
			}
			b.ReportMetric(float64(prepare.Microseconds())/1000/float64(b.N), "prepare-ms")
			b.ReportMetric(float64(cp.Microseconds())/1000/float64(b.N), "copy-ms")
		})
	}
}
