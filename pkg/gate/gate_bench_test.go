package gate

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/puzpuzpuz/xsync/v4"
)

// The benchmarks compare the Map with xsync.Map[uint64, uint64] (the left
// time of the one open episode as the value: the most favourable layout for
// xsync) and with xsync.Map behind the same Bloom filter the Map uses.
//
// Members have random 64-bit ids and one open episode; looked-up keys come
// from a precomputed array (a power of 2 long, larger than the caches), so
// that the loop draws no random numbers. Every member left before benchTs,
// the time looked up, so a present key is denied, as it mostly is in
// production.
//
//	go test -bench . -run '^$' ./pkg/gate

const (
	benchBaseNs = 1_764_633_600_000_000_000
	benchSpread = 1 << 40 // left times spread over ~18 minutes
	benchTs     = benchBaseNs + benchSpread
	benchKeys   = 1 << 22 // 32 MiB of keys per key set
)

var benchSizes = []struct {
	name string
	n    int
}{{"1M", 1_000_000}, {"10M", 10_000_000}}

// benchFixture is built once per size and shared by the sub-benchmarks.
type benchFixture struct {
	gate   *Map
	xs     *xsync.Map[uint64, uint64]
	filter *benchFilter // in front of xs
	keys   map[string][]uint64
}

var (
	benchMu       sync.Mutex
	benchFixtures = map[int]*benchFixture{}
	benchIDs      = map[int][]uint64{}
	benchSink     atomic.Int64
)

// memberIDs returns n random member ids, the same for every call with n.
func memberIDs(n int) []uint64 {
	benchMu.Lock()
	defer benchMu.Unlock()
	if ids, ok := benchIDs[n]; ok {
		return ids
	}
	rng := rand.New(rand.NewPCG(uint64(n), 1))
	ids := make([]uint64, n)
	for i := range ids {
		ids[i] = rng.Uint64()
	}
	benchIDs[n] = ids
	return ids
}

func leftAt(id uint64) uint64 { return benchBaseNs + id%benchSpread }

func fixture(b *testing.B, n int) *benchFixture {
	ids := memberIDs(n)
	benchMu.Lock()
	defer benchMu.Unlock()
	if f, ok := benchFixtures[n]; ok {
		return f
	}
	start := time.Now()
	f := &benchFixture{
		gate:   buildGate(b, ids, Capacity(n)),
		xs:     buildXsync(ids),
		filter: newBenchFilter(n),
		keys:   map[string][]uint64{},
	}
	for _, id := range ids {
		f.filter.add(id)
	}
	rng := rand.New(rand.NewPCG(uint64(n), 2))
	for _, set := range []struct {
		name       string
		presentPct int
	}{{"mixed10", 10}, {"absent", 0}, {"present", 100}} {
		keys := make([]uint64, benchKeys)
		for i := range keys {
			if rng.IntN(100) < set.presentPct {
				keys[i] = ids[rng.IntN(n)]
			} else {
				keys[i] = rng.Uint64() // a member with probability n/2^64
			}
		}
		f.keys[set.name] = keys
	}
	b.Logf("fixture of %d members built in %v", n, time.Since(start).Round(time.Millisecond))
	benchFixtures[n] = f
	return f
}

func buildGate(b *testing.B, ids []uint64, opts ...Opt) *Map {
	m := New(opts...)
	eps := make([]Episode, 1)
	for _, id := range ids {
		eps[0] = Episode{leftAt(id), OpenEnd}
		if err := m.Set(id, eps); err != nil {
			b.Fatal(err)
		}
	}
	return m
}

func buildXsync(ids []uint64) *xsync.Map[uint64, uint64] {
	m := xsync.NewMap[uint64, uint64](xsync.WithPresize(len(ids)))
	for _, id := range ids {
		m.Store(id, leftAt(id))
	}
	return m
}

func xsyncAllows(m *xsync.Map[uint64, uint64], userID, tsNs uint64) bool {
	left, ok := m.Load(userID)
	return !ok || tsNs < left
}

// benchFilter is the Map's filter on its own, for xsync+filter.
type benchFilter struct{ t *table }

func newBenchFilter(n int) *benchFilter {
	t := newTable(slotsFor(n))
	t.slots = nil // only the filter is used
	return &benchFilter{t}
}

func (f *benchFilter) add(userID uint64) { f.t.addToFilter(f.t.hash(userID)) }
func (f *benchFilter) mayContain(userID uint64) bool {
	return f.t.mayContain(f.t.hash(userID))
}

func BenchmarkAllows(b *testing.B) {
	for _, size := range benchSizes {
		b.Run("members="+size.name, func(b *testing.B) {
			f := fixture(b, size.n)
			for _, keySet := range []string{"mixed10", "absent", "present"} {
				keys := f.keys[keySet]
				for _, impl := range []string{"gate", "xsync", "xsync+filter"} {
					for _, parallel := range []bool{false, true} {
						name := fmt.Sprintf("keys=%s/impl=%s/serial", keySet, impl)
						if parallel {
							name = fmt.Sprintf("keys=%s/impl=%s/parallel", keySet, impl)
						}
						b.Run(name, func(b *testing.B) {
							b.ReportAllocs()
							runAllows(b, f, impl, keys, parallel)
							b.StopTimer()
							if keySet == "absent" && impl == "gate" && !parallel {
								b.ReportMetric(falsePositivePct(f.gate, keys), "filter-fp-%")
							}
						})
					}
				}
			}
		})
	}
}

func runAllows(b *testing.B, f *benchFixture, impl string, keys []uint64, parallel bool) {
	// One plain loop per implementation, so that each lookup is a direct
	// call, as in a caller's loop; an indirect call per lookup would cost
	// more than some of the lookups.
	var loop func(from, n int) (allowed int)
	switch impl {
	case "gate":
		loop = func(from, n int) (allowed int) {
			for i := from; i < from+n; i++ {
				if f.gate.Allows(keys[i&(benchKeys-1)], benchTs) {
					allowed++
				}
			}
			return allowed
		}
	case "xsync":
		loop = func(from, n int) (allowed int) {
			for i := from; i < from+n; i++ {
				if xsyncAllows(f.xs, keys[i&(benchKeys-1)], benchTs) {
					allowed++
				}
			}
			return allowed
		}
	case "xsync+filter":
		loop = func(from, n int) (allowed int) {
			for i := from; i < from+n; i++ {
				k := keys[i&(benchKeys-1)]
				if !f.filter.mayContain(k) || xsyncAllows(f.xs, k, benchTs) {
					allowed++
				}
			}
			return allowed
		}
	}
	b.ResetTimer()
	if !parallel {
		benchSink.Add(int64(loop(0, b.N)))
		return
	}
	// Each goroutine takes batches of lookups, starting at its own place in
	// the keys.
	const batch = 256
	var offset atomic.Int64
	b.RunParallel(func(pb *testing.PB) {
		i := int(offset.Add(benchKeys / 8))
		allowed := 0
		for {
			n := 0
			for n < batch && pb.Next() {
				n++
			}
			if n == 0 {
				break
			}
			allowed += loop(i, n)
			i += n
		}
		benchSink.Add(int64(allowed))
	})
}

func falsePositivePct(m *Map, absent []uint64) float64 {
	t := m.table.Load()
	fp := 0
	for _, k := range absent {
		if t.mayContain(t.hash(k)) {
			fp++
		}
	}
	return 100 * float64(fp) / float64(len(absent))
}

// BenchmarkBuild builds 10M members from scratch and reports the build rate
// and the heap each structure holds per member (HeapAlloc after GC, less
// HeapAlloc before).
func BenchmarkBuild(b *testing.B) {
	const n = 10_000_000
	ids := memberIDs(n)
	builds := []struct {
		name  string
		build func() any
	}{
		{"impl=gate/capacity", func() any { return buildGate(b, ids, Capacity(n)) }},
		{"impl=gate/grow", func() any { return buildGate(b, ids) }},
		{"impl=xsync/presize", func() any { return buildXsync(ids) }},
		{"impl=xsync+filter/presize", func() any {
			f := newBenchFilter(n)
			for _, id := range ids {
				f.add(id)
			}
			return []any{buildXsync(ids), f}
		}},
	}
	for _, bb := range builds {
		b.Run(bb.name+"/members=10M", func(b *testing.B) {
			var heap uint64
			var elapsed time.Duration
			for i := range b.N {
				b.StopTimer()
				before := heapAfterGC()
				b.StartTimer()
				start := time.Now()
				built := bb.build()
				elapsed += time.Since(start)
				b.StopTimer()
				if i == 0 { // later iterations may overlap the garbage of earlier ones
					heap = heapAfterGC() - before
					if m, ok := built.(*Map); ok {
						b.ReportMetric(float64(m.MemoryBytes())/n, "MemoryBytes/member")
					}
				}
				runtime.KeepAlive(built)
				b.StartTimer()
			}
			b.ReportMetric(float64(n)*float64(b.N)/elapsed.Seconds(), "members/s")
			b.ReportMetric(float64(heap)/n, "B/member")
		})
	}
}

func heapAfterGC() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// BenchmarkMachine measures what the lookups above are made of on this
// machine: random 8-byte reads from arrays of several sizes, independent
// (the CPU overlaps several misses) and dependent (each address comes from
// the previous read: the full latency). Read the Allows figures against it.
func BenchmarkMachine(b *testing.B) {
	rng := rand.New(rand.NewPCG(3, 4))
	idx := make([]uint64, benchKeys)
	for i := range idx {
		idx[i] = rng.Uint64()
	}
	for _, mib := range []int{1, 16, 256} {
		arr := make([]uint64, mib<<17)
		for i := range arr {
			arr[i] = rng.Uint64()
		}
		mask := uint64(len(arr) - 1)
		b.Run(fmt.Sprintf("random-read/independent/%dMiB", mib), func(b *testing.B) {
			var sum uint64
			for i := range b.N {
				sum += arr[idx[i&(benchKeys-1)]&mask]
			}
			benchSink.Add(int64(sum))
		})
		b.Run(fmt.Sprintf("random-read/dependent/%dMiB", mib), func(b *testing.B) {
			var x uint64
			for i := range b.N {
				x = arr[(x^idx[i&(benchKeys-1)])&mask]
			}
			benchSink.Add(int64(x))
		})
	}
}
