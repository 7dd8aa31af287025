package fanout

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/pkg/gate"
	"github.com/cohortgate/cohortgate/pkg/membership"
	"github.com/cohortgate/cohortgate/topics"
)

// fakeChangelog is a changelog partition as a restore reads it: the
// records, in the order they were produced, through the reader's own
// per-record logic (changelogView.add).
type fakeChangelog struct {
	recs  []*kgo.Record
	lossy error
	err   error
}

func (f *fakeChangelog) read(_ context.Context, q readRequest) (changelogView, error) {
	var v changelogView
	if f.err != nil {
		return v, f.err
	}
	v.start(q)
	for _, r := range f.recs {
		user, err := topics.ParseUserID(r.Key)
		if err != nil {
			return v, err
		}
		if err := v.add(user, r); err != nil {
			return v, err
		}
	}
	v.finish()
	v.lossy = f.lossy
	return v, nil
}

// handoverRun is one owner of partition 0 over its own in-memory store.
type handoverRun struct {
	a         *applier
	store     *membership.Store
	mu        sync.Mutex // restores side by side report at once
	handovers []HandoverInfo
}

const handoverSeenNs = 900_450_000_000 // decided by earlier owners: leaves before it may be late

func newHandoverRun(t *testing.T, src windowSource, mod func(*Config)) *handoverRun {
	t.Helper()
	return newHandoverRunOf(t, src, 1, mod)
}

// newHandoverRunOf is newHandoverRun for an owner of partitions of parts
// (the commands' count) in one store.
func newHandoverRunOf(t *testing.T, src windowSource, parts int32, mod func(*Config)) *handoverRun {
	t.Helper()
	store, err := membership.Open("db", &membership.Options{FS: vfs.NewMem(), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	return newHandoverRunOn(t, store, src, parts, mod)
}

// newHandoverRunOn is newHandoverRunOf on store: an owner started again
// on the same data dir.
func newHandoverRunOn(t *testing.T, store *membership.Store, src windowSource, parts int32, mod func(*Config)) *handoverRun {
	t.Helper()
	cfg := Config{Brokers: []string{"127.0.0.1:1"}, Logger: slog.New(slog.DiscardHandler),
		Now: func() time.Time { return time.UnixMilli(1_000_000) }}
	if mod != nil {
		mod(&cfg)
	}
	cfg.EnsureDefaults()
	run := &handoverRun{store: store}
	ev := EventListener{Handover: func(i HandoverInfo) {
		run.mu.Lock()
		defer run.mu.Unlock()
		run.handovers = append(run.handovers, i)
	}}
	ev.EnsureDefaults()
	g := gate.New()
	rec := &recoverer{src: src, store: store, ev: ev, log: cfg.Logger, topic: cfg.Topics.Changelog, skip: cfg.Testing.UnsafeNoWindowRecovery}
	run.a = &applier{cfg: &cfg, store: store, gate: g, claims: &claims{}, outbox: &outbox{store: store},
		ev: ev, partitions: parts, kp: newKeyPartition(), recover: rec,
		handover: &restorer{cfg: &cfg, store: store, gate: g, rec: rec, ev: ev, layoutParts: parts}}
	return run
}

// claim makes the claim of partition 0 as ownership.claim would for an
// empty store after an owner that judged the commands below judged.
func (r *handoverRun) claim(judged int64) *claim { return r.claimOf(0, judged) }

// claimOf is claim for partition part.
func (r *handoverRun) claimOf(part int32, judged int64) *claim {
	c := newClaim(part, 1, 0, 0)
	c.inheritedMaxNs = handoverSeenNs
	c.maxEventNs.Store(handoverSeenNs)
	c.judgedBelow = judged
	c.changelogID = "cl"
	c.restore = judged > 0
	r.a.claims.put(c)
	return c
}

// apply feeds recs in fetches of at most 7 records, each seeing the high
// watermark end, and returns the changelog records the owner wrote.
func (r *handoverRun) apply(t *testing.T, recs []*kgo.Record, end int64) []*kgo.Record {
	t.Helper()
	return r.applyAll(t, map[int32][]*kgo.Record{0: recs}, map[int32]int64{0: end})
}

// applyAll is apply for several partitions at once: each fetch holds the
// next records of every partition, so that the claims that wait for a
// restore are prepared together.
func (r *handoverRun) applyAll(t *testing.T, byPart map[int32][]*kgo.Record, ends map[int32]int64) []*kgo.Record {
	t.Helper()
	byPart = maps.Clone(byPart)
	var out []*kgo.Record
	for len(byPart) > 0 {
		var fps []kgo.FetchTopicPartition
		for _, p := range slices.Sorted(maps.Keys(byPart)) {
			recs := byPart[p]
			n := min(7, len(recs))
			fps = append(fps, kgo.FetchTopicPartition{Topic: "membership.commands",
				FetchPartition: kgo.FetchPartition{Partition: p, Records: recs[:n], HighWatermark: ends[p]}})
			if byPart[p] = recs[n:]; len(byPart[p]) == 0 {
				delete(byPart, p)
			}
		}
		if err := r.a.applyFetched(context.Background(), fps); err != nil {
			t.Fatal(err)
		}
		for _, it := range r.a.outbox.take() {
			if it.e.Topic == string(topics.Changelog) {
				out = append(out, it.record())
			}
		}
	}
	return out
}

// exported is every user's dump and the commands checkpoint: what two
// stores are compared by, byte for byte. The outbox and its counter are
// left out: they are records still to produce, not state.
func (r *handoverRun) exported(t *testing.T) map[uint64][]byte {
	t.Helper()
	out := make(map[uint64][]byte)
	if err := r.store.Export(func(u uint64, d []byte) error {
		out[u] = bytes.Clone(d)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	for _, c := range r.a.claims.all() {
		cp, ok, err := r.store.Checkpoint("membership.commands", c.partition)
		if err != nil || !ok {
			t.Fatalf("commands checkpoint of partition %d: %d, %v, %v", c.partition, cp, ok, err)
		}
		out[^uint64(0)-uint64(c.partition)] = []byte(fmt.Sprint("checkpoint ", cp))
	}
	return out
}

// handoverCommands is the commands of partition 0: a hand-written part
// with what a restore must carry (identities of applied and refused
// commands, a moved boundary and its window, a reopened empty episode),
// then a seeded mix; tail is where the first owner stopped. The tail
// delivers commands again that must stay duplicates.
func handoverCommands(rng *rand.Rand) (recs []*kgo.Record, tail int) {
	return handoverCommandsOf(rng, 0, func(u uint64) uint64 { return u })
}

// handoverCommandsOf is handoverCommands for partition part, each user u
// of it being user(u).
func handoverCommandsOf(rng *rand.Rand, part int32, user func(uint64) uint64) (recs []*kgo.Record, tail int) {
	const base = 900_000_000_000 // ns; record timestamps are 1e12 ns
	cmd := func(op string, u uint64, atMs int64, rid string) {
		u = user(u)
		v := fmt.Sprintf(`{"op":%q,"user_id":%d,"at_ns":%d`, op, u, base+atMs*1e6)
		if rid != "" {
			v += fmt.Sprintf(`,"request_id":%q`, rid)
		}
		recs = append(recs, &kgo.Record{Topic: "membership.commands", Partition: part, Offset: int64(len(recs)),
			Key: topics.AppendUserID(nil, u), Value: []byte(v + "}"), Timestamp: time.UnixMilli(1_000_000)})
	}
	cmd("leave", 1, 100, "a")
	cmd("rejoin", 1, 200, "")
	cmd("leave", 2, 500, "")
	cmd("rejoin", 2, 300, "") // refused: before the leave
	cmd("leave", 3, 50, "")
	cmd("rejoin", 3, 50, "") // the empty episode [50, 50)
	cmd("leave", 4, 420, "") // late: a window up to what was decided
	cmd("leave", 4, 410, "") // moves the boundary and the window back
	recs = append(recs, &kgo.Record{Topic: "membership.commands", Partition: part, Offset: int64(len(recs)),
		Key: topics.AppendUserID(nil, user(5)), Value: []byte("not json"), Timestamp: time.UnixMilli(1_000_000)})
	for range 300 {
		user := 10 + rng.Uint64N(60)
		op := "leave"
		if rng.IntN(2) == 0 {
			op = "rejoin"
		}
		cmd(op, user, rng.Int64N(800), fmt.Sprint(rng.IntN(3)))
	}
	tail = len(recs)
	cmd("leave", 3, 10, "")   // reopens [50, 50) at 50 (history is never rewritten)
	cmd("rejoin", 4, 600, "") // closes the windowed episode
	cmd("leave", 6, 700, "")
	cmd("leave", 1, 100, "a") // delivered again after the rejoin: a duplicate
	cmd("leave", 2, 250, "")  // moves user 2's boundary before the refused rejoin
	cmd("rejoin", 2, 300, "") // delivered again: a duplicate, not a close
	for range 100 {
		user := 10 + rng.Uint64N(60)
		op := "leave"
		if rng.IntN(2) == 0 {
			op = "rejoin"
		}
		cmd(op, user, rng.Int64N(800), fmt.Sprint(rng.IntN(3)))
	}
	return recs, tail
}

// TestHandoverEqualsReplay: an owner with an empty store that restores
// partition 0 from the changelog and applies the commands after it ends
// with the same bytes in its store (every user's state, history,
// late-leave windows, note and command identities, and the checkpoint) as
// one that replays every command from offset 0 and recovers the windows
// from the changelog. The first owner applied a few commands beyond the
// judged offset, whose records reflect them (claim.reflected). A restore
// that drops the identities differs on the users whose commands come
// again after it (the control), and every changelog the restore must not
// trust falls back to the replay.
func TestHandoverEqualsReplay(t *testing.T) {
	rng := rand.New(rand.NewPCG(16, 4))
	recs, tail := handoverCommands(rng)
	beyond := tail + 3 // the first owner applied these, but committed metadata judged only tail

	first := newHandoverRun(t, &fakeChangelog{}, nil)
	first.claim(0)
	changelog := &fakeChangelog{recs: first.apply(t, recs[:beyond], int64(beyond))}
	if len(changelog.recs) == 0 {
		t.Fatal("the first owner wrote no changelog record")
	}

	replay := newHandoverRun(t, changelog, func(c *Config) { c.Testing.HandoverReplay = true })
	replay.claim(int64(tail))
	replay.apply(t, recs, int64(len(recs)))
	want := replay.exported(t)
	if len(replay.handovers) != 1 || replay.handovers[0].Source != "replay" {
		t.Fatalf("replay: handovers %+v, want one replay", replay.handovers)
	}

	restored := newHandoverRun(t, changelog, nil)
	restored.claim(int64(tail))
	restored.apply(t, recs, int64(len(recs)))
	if len(restored.handovers) != 1 || restored.handovers[0].Source != "changelog" {
		t.Fatalf("restore: handovers %+v, want one from the changelog", restored.handovers)
	}
	if h := restored.handovers[0]; h.Reflected == 0 || h.Windows == 0 || h.Users < 60 {
		t.Fatalf("restore: %+v; want users, windows and records reflecting commands beyond the judged offset", h)
	}
	if diff := diffStores(restored.exported(t), want); diff != "" {
		t.Fatalf("restored store differs from the replay's:\n%s", diff)
	}

	// The control: without identities, the leave of user 1 delivered
	// again reopens a leave after the rejoin, and the rejoin of user 2
	// delivered again closes an episode.
	control := newHandoverRun(t, changelog, func(c *Config) { c.Testing.UnsafeRestoreWithoutIdentities = true })
	control.claim(int64(tail))
	control.apply(t, recs, int64(len(recs)))
	for _, u := range []uint64{1, 2} {
		m, err := control.store.Member(u)
		if err != nil {
			t.Fatal(err)
		}
		r, _ := replay.store.Member(u)
		if m.Status == r.Status {
			t.Errorf("control: user %d is %v as in the replay; a restore without identities should differ", u, m.Status)
		}
	}

	// Changelogs a restore must not trust: each owner replays and ends
	// as the replay did.
	noHeader := &fakeChangelog{recs: stripHeader(changelog.recs, 2)}
	for name, tc := range map[string]struct {
		src  windowSource
		id   string
		want string
	}{
		"lossy":          {&fakeChangelog{recs: changelog.recs, lossy: errors.New("policy delete")}, "cl", "policy delete"},
		"unreadable":     {&fakeChangelog{recs: changelog.recs, err: errors.New("broker gone")}, "cl", "broker gone"},
		"no header":      {noHeader, "cl", "carry no restore header"},
		"changelog id":   {changelog, noChangelogID, "does not name the changelog"},
		"corrupt header": {&fakeChangelog{recs: corruptHeader(changelog.recs, 3)}, "cl", "does not decode"},
		// The first fetch sees a high watermark below the judged offset.
		"commands recreated": {changelog, "cl", "below the judged offset"},
	} {
		t.Run(name, func(t *testing.T) {
			run := newHandoverRun(t, tc.src, nil)
			c := run.claim(int64(tail))
			c.changelogID = tc.id
			if name == "unreadable" {
				// Window recovery retries until it reads; the restore
				// does not wait for it.
				run.a.recover.src = changelog
				run.a.handover.rec = &recoverer{src: tc.src, store: run.store, ev: run.a.ev, log: run.a.cfg.Logger}
			}
			end := int64(len(recs))
			if name == "commands recreated" {
				end = int64(tail - 1)
			}
			run.apply(t, recs, end)
			if len(run.handovers) != 1 || run.handovers[0].Source != "replay" ||
				!strings.Contains(fmt.Sprint(run.handovers[0].Reason), tc.want) {
				t.Fatalf("handovers %+v, want a replay because %q", run.handovers, tc.want)
			}
			if diff := diffStores(run.exported(t), want); diff != "" {
				t.Fatalf("store differs from the replay's:\n%s", diff)
			}
		})
	}
}

// diffStores lists the users whose dumps differ, with both.
func diffStores(got, want map[uint64][]byte) string {
	var b strings.Builder
	for u, w := range want {
		if g := got[u]; !bytes.Equal(g, w) {
			fmt.Fprintf(&b, "user %d:\n  got  %x\n  want %x\n", u, g, w)
		}
	}
	for u, g := range got {
		if _, ok := want[u]; !ok {
			fmt.Fprintf(&b, "user %d only in got: %x\n", u, g)
		}
	}
	return b.String()
}

// stripHeader returns recs with the restore header of user's latest record
// taken out (as a record trimmed to fit is written).
func stripHeader(recs []*kgo.Record, user uint64) []*kgo.Record {
	out := append([]*kgo.Record(nil), recs...)
	for i := len(out) - 1; i >= 0; i-- {
		if string(out[i].Key) == fmt.Sprint(user) {
			r := *out[i]
			r.Headers = nil
			out[i] = &r
			break
		}
	}
	return out
}

// corruptHeader returns recs with a byte of user's latest restore header
// changed.
func corruptHeader(recs []*kgo.Record, user uint64) []*kgo.Record {
	out := append([]*kgo.Record(nil), recs...)
	for i := len(out) - 1; i >= 0; i-- {
		if string(out[i].Key) == fmt.Sprint(user) {
			r := *out[i]
			h := bytes.Clone(r.Headers[0].Value)
			h[13] = 9 // the dump's version, after the header's version, count and offset
			r.Headers = []kgo.RecordHeader{{Key: topics.HeaderRestore, Value: h}}
			out[i] = &r
			break
		}
	}
	return out
}

// TestRestoreHeadersLatest: over several sorted runs, and over spill
// files when the headers held are bounded (down to a few records a
// file, merged in groups), a merge keeps each user's record that follows
// the latest command (the highest commands count, then offset; read
// order between equals), header or none, as a map that keeps the greatest
// would, in user order, and so does each range of users it is split
// into. The chunks and runs held stay within the limit (but for the
// smallest of each, or a header larger than it), and the merges of spill
// files never say they read more entries than their total. Records come in random order of the commands they follow: read
// from several changelog partitions, a user's records are not in the
// order of its commands. Done, no spill file is left.
func TestRestoreHeadersLatest(t *testing.T) {
	rng := rand.New(rand.NewPCG(16, 41))
	for _, tc := range []struct {
		name    string
		records int
		users   uint64
		limit   int64
	}{
		{"empty", 0, 1, 0},
		{"one run", 1000, 300, 0},
		{"runs and a tail", 3*headerRun + 17, 200_000, 0},
		{"one user", headerRun + 1, 1, 0},
		{"spilled", 20_000, 3000, 64 << 10},
		{"spilled many times", 5000, 400, 1},
		{"spilled, one user", 3000, 1, 1},
		{"spilled, large headers", 300, 50, 8 << 10},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fs := vfs.NewMem()
			hs := newRestoreHeaders(spillTo{limit: tc.limit, fs: fs, dir: "temp"})
			type rec struct {
				h       []byte // nil: no header
				follows restoreOrder
			}
			want := make(map[uint64]rec)
			largest := 0 // a header larger than the limit is held alone
			for i := range tc.records {
				user := rng.Uint64N(tc.users)
				r := rec{h: []byte(fmt.Sprint("h", i)),
					follows: restoreOrder{parts: 1 + rng.Int32N(2), offset: rng.Int64N(50)}}
				if tc.name == "spilled, large headers" {
					r.h = bytes.Repeat(r.h, 1+rng.IntN(2000))
				}
				has := rng.IntN(10) > 0
				if !has {
					r.h = nil
					if rng.IntN(2) == 0 {
						r.follows = latestOrder // a tombstone, or a record naming no command
					}
				}
				hs.add(user, r.h, has, r.follows)
				if old, ok := want[user]; !ok || r.follows.compare(old.follows) >= 0 {
					want[user] = r
				}
				largest = max(largest, len(r.h))
				if tc.limit > 0 && hs.held > max(tc.limit, int64(hs.chunkLen+hs.runLen*headerRefBytes))+int64(largest) {
					t.Fatalf("record %d: %d bytes held, limit %d", i, hs.held, tc.limit)
				}
			}
			if hs.failed != nil {
				t.Fatal(hs.failed)
			}
			files := 0
			if hs.spill != nil {
				files = len(hs.spill.runs)
			}
			var last struct {
				done, total int64
				finished    bool
			}
			if err := hs.prepare(context.Background(), func(done, total int64, finished bool) {
				if done > total || last.finished {
					t.Errorf("merging: %d entries of %d read (finished before: %v)", done, total, last.finished)
				}
				last.done, last.total, last.finished = done, total, finished
			}); err != nil {
				t.Fatal(err)
			}
			if files > spillFanIn && (!last.finished || last.done == 0) {
				t.Fatalf("merging: last told %+v, want entries read and the end", last)
			}
			if tc.limit > 0 && tc.records > 1000 {
				if hs.spill.n < 10 || len(hs.spill.runs) > spillFanIn {
					t.Fatalf("%d spill files written, %d left to merge; want many, at most %d", hs.spill.n, len(hs.spill.runs), spillFanIn)
				}
			}
			check := func(r userRange) (users []uint64) {
				t.Helper()
				cs, err := hs.cursors(r.from)
				if err != nil {
					t.Fatal(err)
				}
				defer func() {
					for _, c := range cs {
						c.close()
					}
				}()
				missing, wantMissing := 0, 0
				err = mergeRange(context.Background(), cs, r, func(e *latestHeader) error {
					if n := len(users); n > 0 && users[n-1] >= e.user {
						t.Fatalf("user %d after user %d", e.user, users[n-1])
					}
					users = append(users, e.user)
					wr, ok := want[e.user]
					w := wr.h
					switch {
					case !ok:
						t.Fatalf("user %d never read", e.user)
					case w == nil:
						wantMissing++
						if e.has {
							t.Fatalf("user %d: header %q, want none", e.user, e.h)
						}
					case !e.has || !bytes.Equal(e.h, w):
						t.Fatalf("user %d: header %q, want %q", e.user, e.h, w)
					}
					if !e.has {
						missing++
					}
					return nil
				})
				if err != nil {
					t.Fatal(err)
				}
				if missing != wantMissing {
					t.Fatalf("missing %d, want %d", missing, wantMissing)
				}
				return users
			}
			if users := check(userRange{all: true}); len(users) != len(want) {
				t.Fatalf("%d users, want %d", len(users), len(want))
			}
			bounds := hs.split(3)
			var split []uint64
			for i := 0; i <= len(bounds); i++ {
				r := userRange{all: i == len(bounds)}
				if i > 0 {
					r.from = bounds[i-1]
				}
				if !r.all {
					r.to = bounds[i]
				}
				split = append(split, check(r)...)
			}
			if len(split) != len(want) {
				t.Fatalf("%d users in the ranges %v, want %d", len(split), bounds, len(want))
			}
			hs.done()
			if ls, err := fs.List("temp"); err == nil && len(ls) > 0 || hs.spill != nil && hs.spill.made {
				t.Fatalf("left after done: %v", ls)
			}
		})
	}
}

// TestRestoreInPartsIsTheSource: a restore large enough to be written by
// restoreWorkers goroutines, each a range of users, from a changelog with
// an older record before most users' latest, holds the same bytes as the
// store whose dumps the records carry (states, histories, late-leave
// windows, notes, identities) with the judged checkpoint, and the gate
// holds every user's episodes.
func TestRestoreInPartsIsTheSource(t *testing.T) {
	users := uint64(restoreWorkers*restoreChunk + 1000)
	src, err := membership.Open("src", &membership.Options{FS: vfs.NewMem(), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	var recs []*kgo.Record
	record := func(b *membership.Batch, u uint64, offset int64) {
		h, err := b.AppendDump(appendRestoreHeader(nil, 1, offset), u)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, &kgo.Record{Key: topics.AppendUserID(nil, u), Value: []byte(`{"late_leaves":[]}`),
			Headers: []kgo.RecordHeader{{Key: topics.HeaderRestore, Value: h}}})
	}
	b := src.NewBatch()
	for u := range users {
		if _, err := b.Leave(u, 100+u); err != nil {
			t.Fatal(err)
		}
		if u%4 != 0 {
			record(b, u, int64(3*u)) // an older record, superseded below
		}
		if u%2 == 0 {
			if _, err := b.Rejoin(u, 200+u); err != nil {
				t.Fatal(err)
			}
		}
		if u%5 == 0 {
			if err := b.RecordLateLeave(u, membership.LateLeave{LeftAtNs: 100 + u, ForwardedThroughNs: 150 + u, Exact: true}); err != nil {
				t.Fatal(err)
			}
		}
		if err := b.SetNote(u, []byte(fmt.Sprintf(`{"n":%d}`, u))); err != nil {
			t.Fatal(err)
		}
	}
	// Each user's latest record, in an order that is not the users'.
	for i := range users {
		u := (i * 7919) % users
		record(b, u, int64(3*u+1))
	}
	b.Close()

	store, err := membership.Open("db", &membership.Options{FS: vfs.NewMem(), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	cfg := Config{Brokers: []string{"x:1"}, Logger: slog.New(slog.DiscardHandler)}
	cfg.EnsureDefaults()
	ev := EventListener{}
	ev.EnsureDefaults()
	g := gate.New()
	rec := &recoverer{src: &fakeChangelog{recs: recs}, store: store, ev: ev, log: cfg.Logger}
	r := &restorer{cfg: &cfg, store: store, gate: g, rec: rec, ev: ev}
	judged := int64(3 * users)
	c := newClaim(0, 1, 0, 0)
	c.judgedBelow, c.changelogID, c.restore = judged, "cl", true
	var info HandoverInfo
	if why, err := r.restore(context.Background(), c, judged, &info); err != nil || why != nil {
		t.Fatalf("restore: %v, %v", err, why)
	}
	if info.Users != int(users) {
		t.Fatalf("restored %d users, want %d", info.Users, users)
	}
	// The source's batch is never committed: each user's latest dump is
	// what the restored store must hold, byte for byte.
	got := make(map[uint64][]byte)
	if err := store.Export(func(u uint64, d []byte) error { got[u] = bytes.Clone(d); return nil }); err != nil {
		t.Fatal(err)
	}
	for i := len(recs) - int(users); i < len(recs); i++ {
		u, _ := topics.ParseUserID(recs[i].Key)
		_, dump, err := parseRestoreHeader(recs[i].Headers[0].Value)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got[u], dump) {
			t.Fatalf("user %d: restored\n  %x\nwant\n  %x", u, got[u], dump)
		}
		d, err := membership.DecodeDump(dump)
		if err != nil {
			t.Fatal(err)
		}
		wantEps := gateEpisodes(nil, d.Member.Episodes(nil))
		if gotEps := g.Episodes(u, nil); !slices.Equal(gotEps, wantEps) {
			t.Fatalf("user %d: gate %v, want %v", u, gotEps, wantEps)
		}
	}
	if len(got) != int(users) {
		t.Fatalf("store holds %d users, want %d", len(got), users)
	}
	if cp, ok, err := store.Checkpoint(string(cfg.Topics.Commands), 0); err != nil || !ok || cp != judged {
		t.Fatalf("commands checkpoint %d, %v, %v; want %d", cp, ok, err, judged)
	}
}
