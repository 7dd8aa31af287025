package oracle

import (
	"runtime"
	"strconv"
	"testing"
)

func TestParseSeq(t *testing.T) {
	for _, tc := range []struct {
		value string
		seq   uint64
		ok    bool
	}{
		{"sig-0-", 0, true},
		{"sig-42-....", 42, true},
		{"sig-17179869183-", maxSeq - 1, true},
		{"sig-17179869184-", 0, false}, // maxSeq
		{"sig-99999999999999999999999-", 0, false},
		{"sig-007-", 0, false}, // a leading zero: two spellings of one number
		{"sig--", 0, false},
		{"sig-12", 0, false},
		{"sig-1x-", 0, false},
		{"sag-1-", 0, false},
		{"v1", 0, false},
		{"", 0, false},
	} {
		seq, ok := parseSeq([]byte(tc.value))
		if seq != tc.seq || ok != tc.ok {
			t.Errorf("parseSeq(%q) = %d, %v; want %d, %v", tc.value, seq, ok, tc.seq, tc.ok)
		}
	}
}

// TestJudgeTable judges what only numbered signals meet: a signal with
// records in the table and in full, output records met before their
// input, one number taken by two signals, and more than 255 copies.
func TestJudgeTable(t *testing.T) {
	numbered := func(r *run, user uint64, p int32, seq int, tsMs int64, hs ...Header) Record {
		rec := Record{Partition: p, Offset: r.offset(testTopics.Signals, p), Key: []byte(keyOf(user)),
			Value: []byte("sig-" + strconv.Itoa(seq) + "-...."), Timestamp: tsMs, Headers: hs}
		r.add(kindSignal, 0, rec)
		return rec
	}
	for _, tc := range []struct {
		name      string
		build     func(r *run)
		want      counts
		signalsIn int
		inTable   int // signals the table holds
	}{
		{"forwarded before it is read: counted, not unknown", func(r *run) {
			rec := Record{Partition: right("1"), Key: []byte("1"), Value: []byte("sig-5-...."), Timestamp: 10}
			r.forward(rec)
			numbered(r, 1, right("1"), 5, 10)
		}, counts{Expected: 1}, 1, 1},

		{"forwarded twice, once before it is read: one duplicate", func(r *run) {
			rec := Record{Partition: right("1"), Key: []byte("1"), Value: []byte("sig-5-...."), Timestamp: 10}
			r.forward(rec)
			r.forward(numbered(r, 1, right("1"), 5, 10))
		}, counts{Expected: 1, Duplicates: 1}, 1, 1},

		{"the same record read twice (a producer retry), forwarded once", func(r *run) {
			a := numbered(r, 1, right("1"), 5, 10)
			numbered(r, 1, right("1"), 5, 10)
			r.forward(a)
		}, counts{Expected: 1}, 1, 1},

		{"one number, two signals (another timestamp): both judged, the second in full", func(r *run) {
			a := numbered(r, 1, right("1"), 5, 10)
			b := numbered(r, 1, right("1"), 5, 11)
			r.forward(a, b, b)
		}, counts{Expected: 2, Duplicates: 1}, 2, 1},

		{"one number, two signals, the second lost", func(r *run) {
			r.forward(numbered(r, 1, right("1"), 5, 10))
			numbered(r, 2, right("2"), 5, 10)
		}, counts{Expected: 2, Lost: 1}, 2, 1},

		{"an output record with the number but another value is unknown, and the signal lost", func(r *run) {
			a := numbered(r, 1, right("1"), 5, 10)
			a.Value = []byte("sig-5-...!")
			r.forward(a)
		}, counts{Expected: 1, Lost: 1, Unknown: 1}, 1, 1},

		{"a signal read in its partition and misrouted: one signal, judged with both records", func(r *run) {
			a := numbered(r, 1, right("1"), 5, 10)
			b := numbered(r, 1, wrong("1"), 5, 10)
			r.republish(testTopics.Signals, b)
			r.forward(a)
		}, counts{Expected: 1}, 1, 1},

		{"misrouted first, then in its partition, forwarded twice: one duplicate", func(r *run) {
			b := numbered(r, 1, wrong("1"), 5, 10)
			r.republish(testTopics.Signals, b)
			a := numbered(r, 1, right("1"), 5, 10)
			r.forward(a, a)
		}, counts{Expected: 1, Duplicates: 1}, 1, 1},

		{"marked gated in one record of two: gated, and leaked when forwarded in an episode", func(r *run) {
			r.cmd(1, "leave", 5, "a")
			r.changelog(1, left(5))
			a := numbered(r, 1, right("1"), 5, 10)
			numbered(r, 1, right("1"), 5, 10, gated)
			r.forward(a)
		}, counts{Leaked: 1}, 1, 1},

		{"a signal in an episode, gated, not forwarded; one outside it, forwarded", func(r *run) {
			r.cmd(1, "leave", 100, "a")
			r.changelog(1, left(100))
			numbered(r, 1, right("1"), 5, 150, gated)
			r.forward(numbered(r, 1, right("1"), 6, 90))
		}, counts{Expected: 1}, 2, 2},

		{"forwarded 300 times: 299 duplicates", func(r *run) {
			a := numbered(r, 1, right("1"), 5, 10)
			for range 300 {
				r.forward(a)
			}
		}, counts{Expected: 1, Duplicates: 299}, 1, 1},

		{"timestamp skew and bad keys stay out of the table", func(r *run) {
			a := numbered(r, 1, right("1"), 5, 10, Header{HeaderExpect, []byte(ExpectTimestampSkew)})
			r.deadLetter(testTopics.Signals, a, reasonTimestampSkew)
			rec := Record{Partition: 0, Offset: r.offset(testTopics.Signals, 0), Key: []byte("x"), Value: []byte("sig-6-"), Timestamp: 10}
			r.add(kindSignal, 0, rec)
			r.forward(rec)
		}, counts{Unknown: 1, Poison: 1}, 2, 0},
	} {
		for _, style := range valueStyles[1:] {
			t.Run(tc.name+"/"+style.name, func(t *testing.T) {
				r := newRun(t, style)
				tc.build(r)
				rep := r.report()
				if got := countsOf(rep); got != tc.want {
					t.Fatalf("counts\n %+v\nwant\n %+v\n%s", got, tc.want, rep.Details())
				}
				if rep.SignalsIn != tc.signalsIn {
					t.Fatalf("SignalsIn = %d, want %d", rep.SignalsIn, tc.signalsIn)
				}
				if got := r.j.paths[0].table.present; got != tc.inTable {
					t.Fatalf("the table holds %d signals, want %d", got, tc.inTable)
				}
			})
		}
	}
}

// TestJudgeTableMemory judges a load of numbered signals, each forwarded
// once, after Seal (as Verify does), and checks that what the Judge holds
// grows by the table's 5 bytes a signal, not by a digest's hundreds.
func TestJudgeTableMemory(t *testing.T) {
	n := 1 << 20
	if testing.Short() {
		n = 1 << 17
	}
	j, err := NewJudge(Config{Topics: testTopics, Partitions: testParts})
	if err != nil {
		t.Fatal(err)
	}
	j.Seal()
	before := heapInUse()
	addNumbered(j, n)
	after := heapInUse()
	rep := j.Report()
	if rep.SignalsIn != n || rep.Expected != n || rep.Forwarded != n || rep.Damage() != 0 {
		t.Fatalf("report %+v\n%s", rep, rep.Details())
	}
	perSignal := float64(after-before) / float64(n)
	t.Logf("%d signals: %.1f bytes each", n, perSignal)
	if perSignal > 8 {
		t.Fatalf("the Judge holds %.1f bytes a signal, want at most 8 (the table's 5 and its directory)", perSignal)
	}
	runtime.KeepAlive(j)
}

// addNumbered hands j n numbered signals of 1000 users, each with its
// output record, as Verify would: inputs first.
func addNumbered(j *Judge, n int) { addSignals(j, n, "sig-") }

// addSignals hands j n signals whose values start with prefix and their
// number, each with its output record, inputs first.
func addSignals(j *Judge, n int, prefix string) {
	value := make([]byte, 0, 100)
	rec := Record{}
	for _, add := range []func(Record){j.AddSignal, j.AddCohort} {
		offsets := make([]int64, testParts)
		for seq := range n {
			user := uint64(seq%1000 + 1)
			rec.Key = strconv.AppendUint(rec.Key[:0], user, 10)
			rec.Partition = partitionOf(rec.Key, testParts)
			rec.Offset = offsets[rec.Partition]
			offsets[rec.Partition]++
			value = append(strconv.AppendInt(append(value[:0], prefix...), int64(seq), 10), "-......"...)
			rec.Value = value
			rec.Timestamp = 1_700_000_000_000 + int64(seq)
			add(rec)
		}
	}
}

// heapInUse is the live heap after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapAlloc
}

// BenchmarkJudgeTable prints what a signal costs the Judge, its input
// and its output record added and its share of Report, kept in full
// (opaque values), in the table as they come, and in the table after
// Seal (as Verify does).
func BenchmarkJudgeTable(b *testing.B) {
	const n = 1 << 20
	for _, style := range valueStyles {
		b.Run(style.name, func(b *testing.B) {
			prefix := "v-"
			if style.numbered {
				prefix = "sig-"
			}
			for b.Loop() {
				j, err := NewJudge(Config{Topics: testTopics, Partitions: testParts})
				if err != nil {
					b.Fatal(err)
				}
				if style.sealed {
					j.Seal()
				}
				before := heapInUse()
				addSignals(j, n, prefix)
				b.ReportMetric(float64(heapInUse()-before)/n, "B/signal")
				if rep := j.Report(); rep.Damage() != 0 || rep.Expected != n {
					b.Fatal(rep.Details())
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/n, "ns/signal")
		})
	}
}
