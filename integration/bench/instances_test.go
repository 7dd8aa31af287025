package main

import (
	"strings"
	"testing"
	"time"
)

// TestClassifyLine: the processor's log lines the step reads, as its
// logging listener writes them (pkg/fanout MakeLoggingEventListener, text
// format), and lines it must ignore.
func TestClassifyLine(t *testing.T) {
	cases := []struct {
		name string
		line string
		want eventKind
		ok   bool
	}{
		{"assigned, several", `time=2026-12-05T07:58:27.636Z level=INFO msg="partitions assigned; catching up with their commands before forwarding" partitions="[0 1 2 3 4 5]"`, assignedSome, true},
		{"assigned, one", `time=2026-12-05T07:58:27.636Z level=INFO msg="partitions assigned; catching up with their commands before forwarding" partitions=[2]`, assignedSome, true},
		{"assigned, none", `time=2026-12-05T07:58:27.636Z level=INFO msg="partitions assigned; catching up with their commands before forwarding" partitions=[]`, assignedNone, true},
		{"released", `time=2026-12-05T07:58:31.453Z level=INFO msg="partitions released" partitions="[3 4 5]"`, released, true},
		{"restored", `time=2026-12-05T07:58:27.746Z level=INFO msg="empty owner: partition's users restored from the changelog" partition=0 users=3334 records=6668`, restored, true},
		{"replayed", `time=2026-12-05T07:58:27.746Z level=WARN msg="empty owner: replaying the partition's commands from offset 0, not restoring from the changelog" partition=0 why="no metadata"`, replayed, true},
		{"caught up", `time=2026-12-05T07:58:27.747Z level=INFO msg="partition caught up with its commands; forwarding" partition=0 next_command_offset=6668 took=110.69022ms`, 0, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, ok := classifyLine(c.line)
			if ok != c.ok || (ok && got != c.want) {
				t.Errorf("classifyLine = %v, %v; want %v, %v", got, ok, c.want, c.ok)
			}
		})
	}
}

// TestGroupLogLastAssigned: the last rebalance is known only once the
// newcomer has had partitions; it is then the latest assignment with
// partitions of any instance since the step's mark, and empty
// assignments do not count.
func TestGroupLogLastAssigned(t *testing.T) {
	base := time.Date(2026, 12, 5, 8, 0, 0, 0, time.UTC)
	var l groupLog
	add := func(at time.Duration, instance int, k eventKind) {
		l.events = append(l.events, groupEvent{at: base.Add(at), instance: instance, kind: k})
	}
	add(0, 1, assignedSome) // an earlier step
	mark := l.mark()
	if _, ok := l.lastAssigned(mark, []int{2}); ok {
		t.Fatal("a last assignment before anything happened in the step")
	}
	add(1*time.Second, 1, released)
	add(2*time.Second, 1, assignedNone)
	if _, ok := l.lastAssigned(mark, []int{2}); ok {
		t.Fatal("a last assignment before the newcomer had partitions")
	}
	add(3*time.Second, 2, assignedSome)
	add(4*time.Second, 2, restored)
	add(5*time.Second, 1, assignedNone)
	last, ok := l.lastAssigned(mark, []int{2})
	if !ok || !last.Equal(base.Add(3*time.Second)) {
		t.Errorf("lastAssigned = %v, %v; want %v, true", last, ok, base.Add(3*time.Second))
	}
	if _, ok := l.lastAssigned(mark, []int{1, 2}); ok {
		t.Error("a last assignment before instance 1 had partitions in the step")
	}
	add(6*time.Second, 1, assignedSome)
	if last, ok := l.lastAssigned(mark, []int{1, 2}); !ok || !last.Equal(base.Add(6*time.Second)) {
		t.Errorf("lastAssigned of 1 and 2 = %v, %v; want %v, true", last, ok, base.Add(6*time.Second))
	}
	if rel, ok := l.firstReleased(mark); !ok || !rel.Equal(base.Add(time.Second)) {
		t.Errorf("firstReleased = %v, %v; want %v, true", rel, ok, base.Add(time.Second))
	}
	if r, p := l.handovers(mark); r != 1 || p != 0 {
		t.Errorf("handovers = %d restored, %d replayed; want 1, 0", r, p)
	}
}

// TestProbeLog: a partition forwards again at the first read of a probe
// written at or after the moment asked about; the step is settled only
// when every partition has one; the worst wait is the longest write →
// read of any probe.
func TestProbeLog(t *testing.T) {
	base := time.Date(2026, 12, 5, 8, 0, 0, 0, time.UTC)
	ms := func(n int) time.Time { return base.Add(time.Duration(n) * time.Millisecond) }
	l := probeLog{read: make(map[probeID]time.Time)}
	for seq := range 4 {
		l.sent(ms(100 * seq)) // seq 0..3 written at 0, 100, 200, 300 ms
	}
	l.readAt(probeID{seq: 0, part: 0}, ms(50))
	l.readAt(probeID{seq: 0, part: 1}, ms(900)) // partition 1 stalled by the rebalance
	l.readAt(probeID{seq: 1, part: 0}, ms(150))
	l.readAt(probeID{seq: 1, part: 1}, ms(900))
	l.readAt(probeID{seq: 2, part: 0}, ms(250))
	l.readAt(probeID{seq: 2, part: 1}, ms(950))
	l.readAt(probeID{seq: 2, part: 1}, ms(2000)) // a duplicate read keeps the first
	l.readAt(probeID{seq: 9, part: 0}, ms(10))   // never written: ignored

	first, all := l.firstAfter(ms(150), 2)
	if !all {
		t.Fatalf("firstAfter(150ms): not every partition: %v", first)
	}
	if !first[0].Equal(ms(250)) || !first[1].Equal(ms(950)) {
		t.Errorf("firstAfter(150ms) = %v; want partition 0 at 250ms, 1 at 950ms", first)
	}
	if _, all := l.firstAfter(ms(300), 2); all {
		t.Error("firstAfter(300ms): settled, but no probe written at 300ms was read")
	}
	if got, want := l.worstWait(), 900*time.Millisecond; got != want {
		t.Errorf("worstWait = %v; want %v (seq 0 of partition 1)", got, want)
	}
}

// TestInstancesReport: each group size's figures are the median, min and
// max over the rounds; "vs 1 instance" pairs the steps of the same round;
// a failed step is counted and named, not averaged in.
func TestInstancesReport(t *testing.T) {
	step := func(round, n int, cpu float64, fwd time.Duration) instancesStep {
		return instancesStep{Round: round, N: n, ForwardAgain: fwd, WorstWait: 2 * fwd, Settle: 3 * fwd, SettleCPU: 1,
			Restored: 6 / n, Signals: 2_000_000, Window: 2 * time.Second, CPU: cpu, PeakRSS: int64(n) << 20}
	}
	r := &instancesReport{
		Options: &instancesOptions{members: 1_000_000, signals: 2_000_000, partitions: 6, max: 2, runs: 3, probeEvery: 50 * time.Millisecond},
		Started: time.Date(2026, 12, 5, 8, 0, 0, 0, time.UTC),
		Steps: []instancesStep{
			step(1, 1, 2, time.Second), step(1, 2, 3, 2*time.Second),
			step(2, 1, 4, 3*time.Second), step(2, 2, 4, 4*time.Second),
			step(3, 1, 3, 5*time.Second), {Round: 3, N: 2, Err: "not settled within 10m0s"},
		},
	}
	r.Steps[1].FromRelease = 2500 * time.Millisecond
	rows := r.rows()
	if len(rows) != 2 {
		t.Fatalf("%d rows; want 2", len(rows))
	}
	one, two := rows[0], rows[1]
	if one.Done != 3 || one.Failed != 0 || two.Done != 2 || two.Failed != 1 {
		t.Errorf("done/failed: 1 instance %d/%d, 2 instances %d/%d; want 3/0 and 2/1", one.Done, one.Failed, two.Done, two.Failed)
	}
	// CPU per million: 1 instance 1, 2, 1.5 → median 1.5; 2 instances 1.5, 2.
	if want := (spread{N: 3, Median: 1.5, Min: 1, Max: 2}); one.CPU != want {
		t.Errorf("1 instance CPU per million = %+v; want %+v", one.CPU, want)
	}
	// Round by round: 1.5/1 and 2/2.
	if want := (spread{N: 2, Median: 1.25, Min: 1, Max: 1.5}); two.CPUvsOne != want {
		t.Errorf("2 instances vs 1 = %+v; want %+v", two.CPUvsOne, want)
	}
	if want := (spread{N: 3, Median: 3, Min: 1, Max: 5}); one.ForwardAgain != want {
		t.Errorf("1 instance forwarding again = %+v; want %+v", one.ForwardAgain, want)
	}
	if one.FromRelease.N != 0 || two.FromRelease.N != 1 {
		t.Errorf("first release counted in %d and %d steps; want 0 and 1", one.FromRelease.N, two.FromRelease.N)
	}
	if one.Restored != 18 || two.Restored != 6 {
		t.Errorf("restored %d and %d; want 18 and 6", one.Restored, two.Restored)
	}

	md := r.markdown()
	for _, want := range []string{
		"## 2026-12-05 08:00 UTC: 1 to 2 instances in one group, 1,000,000 members",
		"| 1 | 3.00 [1.00 – 5.00] | – |",
		"| 2 (1 failed) | 3.00 [2.00 – 4.00] | 2.50 |",
		"| 1.50 [1.00 – 2.00] | 1.00 [1.00 – 1.00] | 1,000,000 [1,000,000 – 1,000,000] | 1 MiB |",
		"round 3, 2 instance(s) failed: not settled within 10m0s",
	} {
		if !strings.Contains(md, want) {
			t.Errorf("the report lacks %q:\n%s", want, md)
		}
	}
	if lines := strings.Count(md, "\n"); lines > 80 {
		t.Errorf("the report has %d lines; a section has at most 80", lines)
	}
}
