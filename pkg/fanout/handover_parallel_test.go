package fanout

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/pkg/membership"
	"github.com/cohortgate/cohortgate/topics"
)

// sideBySideChangelog is a changelog of several partitions as restores
// read them: a read of partition p gets parts[p]'s records, through the
// reader's own per-record logic, and says how far it is as the
// changelogReader does. A read waits until meet reads have started (or
// fails after a bound, and the restore falls back to the replay): only
// restores that run side by side meet. The reads of the partitions in
// crash then wait for their context to end: a crash in the middle of a
// restore.
type sideBySideChangelog struct {
	parts map[int32]*fakeChangelog
	meet  int
	crash map[int32]bool

	mu      sync.Mutex
	started int
	reading int // reads under way, and the most at once
	most    int
	met     chan struct{} // closed when meet reads started
	// seen is, per partition, the progress a read found its restore
	// reporting while it read (restoreProgress.current).
	seen map[int32]RestoreProgressInfo
}

func newSideBySideChangelog(parts map[int32]*fakeChangelog, meet int, crash map[int32]bool) *sideBySideChangelog {
	return &sideBySideChangelog{parts: parts, meet: meet, crash: crash, met: make(chan struct{}),
		seen: make(map[int32]RestoreProgressInfo)}
}

func (f *sideBySideChangelog) read(ctx context.Context, q readRequest) (changelogView, error) {
	src := f.parts[q.part]
	if !q.latest {
		return src.read(ctx, q) // window recovery
	}
	f.mu.Lock()
	if f.started++; f.started == f.meet {
		close(f.met)
	}
	f.reading++
	f.most = max(f.most, f.reading)
	f.mu.Unlock()
	defer func() {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.reading--
	}()
	select {
	case <-f.met:
	case <-time.After(10 * time.Second):
		return changelogView{}, fmt.Errorf("partition %d: %d reads did not run side by side", q.part, f.meet)
	case <-ctx.Done():
		return changelogView{}, ctx.Err()
	}
	var v changelogView
	v.start(q)
	q.progress.reading(phaseReadChangelog, int64(len(src.recs)), -1)
	for i, r := range src.recs {
		if i == len(src.recs)/2 && f.crash[q.part] {
			q.progress.advance(int64(i), 0)
			f.record(q)
			<-ctx.Done() // the process dies here, half-way through the read
			v.done()
			return changelogView{}, ctx.Err()
		}
		user, err := topics.ParseUserID(r.Key)
		if err != nil {
			return v, err
		}
		if err := v.add(user, r); err != nil {
			return v, err
		}
		q.progress.advance(int64(i+1), 0)
	}
	f.record(q)
	q.progress.reportNow()
	v.finish()
	return v, nil
}

func (f *sideBySideChangelog) record(q readRequest) {
	if rp, ok := q.progress.current(); ok {
		f.mu.Lock()
		f.seen[q.part] = rp
		f.mu.Unlock()
	}
}

// usersOf returns, for each of parts partitions, a mapping of the users
// 1..maxUser onto users whose key is in that partition.
func usersOf(parts int32, maxUser uint64) []func(uint64) uint64 {
	kp := newKeyPartition()
	m := make([]map[uint64]uint64, parts)
	next := make([]uint64, parts)
	for p := range m {
		m[p] = make(map[uint64]uint64)
		next[p] = 1
	}
	for u := uint64(1000); ; u++ {
		p := kp.of(topics.AppendUserID(nil, u), parts)
		if next[p] <= maxUser {
			m[p][next[p]] = u
			next[p]++
		}
		full := true
		for _, n := range next {
			full = full && n > maxUser
		}
		if full {
			break
		}
	}
	out := make([]func(uint64) uint64, parts)
	for p := range out {
		out[p] = func(u uint64) uint64 { return m[p][u] }
	}
	return out
}

// TestHandoverSideBySideEqualsReplay: an owner with an empty store that
// takes over four partitions restores them side by side (the reads meet:
// a sequential restore would not reach the second read before the first
// ended) and ends, after the commands beyond the judged offsets, with the
// bytes of owners that replay each partition from offset 0. Its restores
// say how far they are while they read, and nothing once done.
//
// Then the crash: a new owner's restores are cut short half-way through
// the reads of three partitions while the fourth's completes. Its store
// holds that partition whole and nothing of the others (each restore is
// imported all or nothing); an owner started again on the same store
// restores the three, reads the fourth's commands from its checkpoint,
// and ends with the replay's bytes too.
func TestHandoverSideBySideEqualsReplay(t *testing.T) {
	const parts = 4
	users := usersOf(parts, 70)
	recs := make(map[int32][]*kgo.Record)
	tails := make(map[int32]int)
	ends := make(map[int32]int64)
	changelogs := make(map[int32]*fakeChangelog)
	want := make(map[uint64][]byte)
	for p := range int32(parts) {
		rng := rand.New(rand.NewPCG(25, uint64(p)))
		recs[p], tails[p] = handoverCommandsOf(rng, p, users[p])
		ends[p] = int64(len(recs[p]))
		beyond := tails[p] + 3

		first := newHandoverRunOf(t, &fakeChangelog{}, parts, nil)
		first.claimOf(p, 0)
		changelogs[p] = &fakeChangelog{recs: first.applyAll(t, map[int32][]*kgo.Record{p: recs[p][:beyond]},
			map[int32]int64{p: int64(beyond)})}

		replay := newHandoverRunOf(t, changelogs[p], parts, func(c *Config) { c.Testing.HandoverReplay = true })
		replay.claimOf(p, int64(tails[p]))
		replay.applyAll(t, map[int32][]*kgo.Record{p: recs[p]}, map[int32]int64{p: ends[p]})
		for u, d := range replay.exported(t) {
			want[u] = d
		}
	}

	t.Run("side by side", func(t *testing.T) {
		src := newSideBySideChangelog(changelogs, parts, nil)
		run := newHandoverRunOf(t, src, parts, func(c *Config) { c.RestoreParallel = parts })
		var progress []RestoreProgressInfo
		var mu sync.Mutex
		run.a.handover.ev.RestoreProgress = func(i RestoreProgressInfo) {
			mu.Lock()
			defer mu.Unlock()
			progress = append(progress, i)
		}
		var claims []*claim
		for p := range int32(parts) {
			claims = append(claims, run.claimOf(p, int64(tails[p])))
		}
		run.applyAll(t, recs, ends)
		if len(run.handovers) != parts {
			t.Fatalf("handovers %+v, want %d", run.handovers, parts)
		}
		for _, h := range run.handovers {
			if h.Source != "changelog" {
				t.Fatalf("partition %d: %v", h.Partition, h)
			}
		}
		if diff := diffStores(run.exported(t), want); diff != "" {
			t.Fatalf("restored store differs from the replays':\n%s", diff)
		}
		for p := range int32(parts) {
			seen := src.seen[p]
			if seen.Phase != phaseReadChangelog || seen.Partition != p ||
				seen.Records != int64(len(changelogs[p].recs)) || seen.RecordsTotal != seen.Records {
				t.Errorf("partition %d: progress while reading %+v, want every record of %d read", p, seen, len(changelogs[p].recs))
			}
			if _, on := claims[p].progress.current(); on {
				t.Errorf("partition %d: a restore still reported after it ended", p)
			}
		}
		if len(progress) < parts {
			t.Errorf("RestoreProgress events %+v, want one at the end of each read", progress)
		}
	})

	t.Run("memory bound", func(t *testing.T) {
		// A bound that one restore fills: they read one at a time, the
		// others say they wait for memory, and all restore.
		src := newSideBySideChangelog(changelogs, 1, nil)
		run := newHandoverRunOf(t, src, parts, func(c *Config) { c.RestoreParallel = parts })
		run.a.handover.budget = newMemBudget(1)
		var mu sync.Mutex
		waited := 0
		var claims []*claim
		for p := range int32(parts) {
			claims = append(claims, run.claimOf(p, int64(tails[p])))
		}
		stop := make(chan struct{})
		defer close(stop)
		go func() { // watches for restores that say they wait
			for {
				select {
				case <-stop:
					return
				case <-time.After(time.Millisecond):
				}
				for _, c := range claims {
					if rp, ok := c.progress.current(); ok && strings.HasPrefix(rp.Phase, "waiting for memory") {
						mu.Lock()
						waited++
						mu.Unlock()
					}
				}
			}
		}()
		run.applyAll(t, recs, ends)
		for _, h := range run.handovers {
			if h.Source != "changelog" {
				t.Fatalf("partition %d: %v", h.Partition, h)
			}
		}
		if diff := diffStores(run.exported(t), want); diff != "" {
			t.Fatalf("restored store differs from the replays':\n%s", diff)
		}
		src.mu.Lock()
		most := src.most
		src.mu.Unlock()
		mu.Lock()
		defer mu.Unlock()
		if most != 1 || waited == 0 {
			t.Fatalf("%d reads at once, %d polls saw a restore wait for memory; want 1 and some", most, waited)
		}
	})

	t.Run("crash in the middle", func(t *testing.T) {
		crash := map[int32]bool{0: true, 1: true, 3: true}
		src := newSideBySideChangelog(changelogs, parts, crash)
		run := newHandoverRunOf(t, src, parts, func(c *Config) { c.RestoreParallel = parts })
		for p := range int32(parts) {
			run.claimOf(p, int64(tails[p]))
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		var fps []kgo.FetchTopicPartition
		for p := range int32(parts) {
			fps = append(fps, kgo.FetchTopicPartition{Topic: "membership.commands",
				FetchPartition: kgo.FetchPartition{Partition: p, HighWatermark: ends[p]}})
		}
		go func() { done <- run.a.applyFetched(ctx, fps) }()
		waitFor(t, "the restore that completes, and the others half-way through their reads", func() bool {
			run.mu.Lock()
			defer run.mu.Unlock()
			src.mu.Lock()
			defer src.mu.Unlock()
			return len(run.handovers) == 1 && len(src.seen) == parts
		})
		cancel() // the crash
		if err := <-done; err != nil && !errors.Is(err, context.Canceled) {
			t.Fatal(err)
		}
		for p := range int32(parts) {
			_, ok, err := run.store.Checkpoint("membership.commands", p)
			if err != nil || ok == crash[p] {
				t.Fatalf("partition %d: checkpoint %v, %v after the crash; want one only for the restore that completed", p, ok, err)
			}
		}
		// Started again on the same store: the completed partition is
		// the store's, the others restore.
		again := newHandoverRunOn(t, run.store, newSideBySideChangelog(changelogs, len(crash), nil), parts,
			func(c *Config) { c.RestoreParallel = parts })
		byPart := make(map[int32][]*kgo.Record)
		for p := range int32(parts) {
			if crash[p] {
				again.claimOf(p, int64(tails[p]))
				byPart[p] = recs[p]
				continue
			}
			cp, _, _ := run.store.Checkpoint("membership.commands", p)
			c := newClaim(p, 1, 0, cp)
			c.inheritedMaxNs, c.judgedBelow, c.changelogID = handoverSeenNs, int64(tails[p]), "cl"
			c.maxEventNs.Store(handoverSeenNs)
			again.a.claims.put(c)
			byPart[p] = recs[p][cp:]
		}
		again.applyAll(t, byPart, ends)
		if len(again.handovers) != len(crash) {
			t.Fatalf("handovers after the restart %+v, want %d", again.handovers, len(crash))
		}
		// A restored user whose record reflects commands beyond the
		// judged offset (claim.reflected, kept in memory) has them
		// applied again after the restart, as duplicates, as after any
		// crash (the package doc, Delivery): the note of its last
		// command says so, where the replay's says it changed. The rest
		// is the replay's, byte for byte where compared.
		if diff := diffStates(t, again.exported(t), want); diff != "" {
			t.Fatalf("store after the crash and the restart differs from the replays':\n%s", diff)
		}
	})
}

// diffStates lists the users whose states differ but for the note of
// their last command: status, boundary, history, late-leave windows and
// how many command identities the store remembers; and the checkpoints.
func diffStates(t *testing.T, got, want map[uint64][]byte) string {
	t.Helper()
	state := func(b []byte) string {
		if len(b) == 0 || bytes.HasPrefix(b, []byte("checkpoint ")) {
			return string(b)
		}
		d, err := membership.DecodeDump(b)
		if err != nil {
			t.Fatal(err)
		}
		d.Member.Note = nil
		return fmt.Sprintf("%+v ids=%d", d.Member, d.Identities)
	}
	var out strings.Builder
	for u, w := range want {
		if g, w := state(got[u]), state(w); g != w {
			fmt.Fprintf(&out, "user %d:\n  got  %s\n  want %s\n", u, g, w)
		}
	}
	for u := range got {
		if _, ok := want[u]; !ok {
			fmt.Fprintf(&out, "user %d: not in the replay's store\n", u)
		}
	}
	return out.String()
}

// TestMemBudget: restores side by side hold at most the budget's bytes;
// one that would pass it waits, says what the others hold, and goes on
// once they give theirs back; one larger than the budget runs alone; a
// wait ends with its context.
func TestMemBudget(t *testing.T) {
	b := newMemBudget(100)
	first, err := b.acquire(context.Background(), 60, func(int64) { t.Error("the first waited") })
	if err != nil {
		t.Fatal(err)
	}
	told := make(chan int64, 1)
	got := make(chan func(), 1)
	go func() {
		release, err := b.acquire(context.Background(), 60, func(held int64) { told <- held })
		if err != nil {
			t.Error(err)
		}
		got <- release
	}()
	if held := <-told; held != 60 {
		t.Fatalf("the second was told %d bytes are held, want 60", held)
	}
	select {
	case <-got:
		t.Fatal("the second went on while the first held its bytes")
	case <-time.After(50 * time.Millisecond): // a bound on what must not happen
	}
	first()
	first() // a second call gives nothing back twice
	second := <-got
	ctx, cancel := context.WithCancel(context.Background())
	waiting := make(chan struct{})
	go func() { <-waiting; cancel() }()
	if _, err := b.acquire(ctx, 1000, func(int64) { close(waiting) }); !errors.Is(err, context.Canceled) {
		t.Fatalf("a wait whose context ended: %v", err)
	}
	second()
	alone, err := b.acquire(context.Background(), 1000, func(int64) { t.Error("a restore alone waited") })
	if err != nil {
		t.Fatal(err)
	}
	alone()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.mu.held != 0 {
		t.Fatalf("%d bytes held after every release", b.mu.held)
	}
}
