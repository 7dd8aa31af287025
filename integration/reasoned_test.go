package integration

import (
	be "encoding/binary"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cohortgate/cohortgate/integration/workload"
	"github.com/cohortgate/cohortgate/pkg/fanout"
	"github.com/cohortgate/cohortgate/pkg/membership"
	"github.com/cohortgate/cohortgate/topics"
)

// The tests of this file need what the shared broker cannot be asked
// for: a broker that stamps records with their append time, or one that
// compacts a topic when told to. Each runs on an embedded broker of its
// own (kfake), whatever broker the rest of the package uses.

// privateBroker is an embedded broker for one test, closed when it ends.
func privateBroker(t *testing.T) *kfake.Cluster {
	t.Helper()
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// envOn is newEnv on the private broker c.
func envOn(t *testing.T, c *kfake.Cluster, parts int32) *env {
	t.Helper()
	id := randomID()
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	e := &env{t: t, set: workload.Topics("rs-" + id), group: "rs-" + id, parts: parts, cl: cl, adm: kadm.NewClient(cl)}
	e.createTopics(parts, parts)
	return e
}

// configOn is env.config for a processor of the private broker c.
func (e *env) configOn(c *kfake.Cluster) fanout.Config {
	cfg := e.config()
	cfg.Brokers = c.ListenAddrs()
	return cfg
}

// readOn is env.readAll on the private broker c.
func (e *env) readOn(c *kfake.Cluster, topic topics.Topic) []*kgo.Record {
	e.t.Helper()
	ctx := e.ctx(60 * time.Second)
	ends := stableEnds(e.t, ctx, e.adm, topic)
	return readCommitted(e.t, ctx, topic, ends, func(opts ...kgo.Opt) (*kgo.Client, error) {
		return kgo.NewClient(append(opts, kgo.SeedBrokers(c.ListenAddrs()...))...)
	})
}

// latestOf returns user's latest changelog record on c, the way a reader
// of the changelog takes it (the greatest commands partition count, then
// offset), or false when the user has none.
func (e *env) latestOf(c *kfake.Cluster, user uint64) (topics.MemberRecord, bool) {
	e.t.Helper()
	var (
		latest topics.MemberRecord
		found  bool
	)
	for _, r := range e.readOn(c, e.set.Changelog) {
		u, err := topics.ParseUserID(r.Key)
		if err != nil || u != user || r.Value == nil {
			continue
		}
		rec, err := topics.DecodeMemberRecord(r.Value)
		if err != nil {
			e.t.Fatalf("changelog record of user %d: %v", user, err)
		}
		if rec.Command == nil {
			continue
		}
		if !found || rec.Command.Partitions > latest.Command.Partitions ||
			(rec.Command.Partitions == latest.Command.Partitions && rec.Command.Offset > latest.Command.Offset) {
			latest, found = rec, true
		}
	}
	return latest, found
}

// waitLatest waits until user's latest changelog record follows the
// command at offset and returns it.
func (e *env) waitLatest(c *kfake.Cluster, user uint64, offset int64) topics.MemberRecord {
	e.t.Helper()
	var rec topics.MemberRecord
	eventually(e.t, 60*time.Second, func() error {
		r, ok := e.latestOf(c, user)
		if !ok || r.Command.Offset < offset {
			return fmt.Errorf("user %d: no changelog record of the command at offset %d yet", user, offset)
		}
		rec = r
		return nil
	})
	return rec
}

// appendTimeOn makes c stamp every batch produced to topic with the time
// it appends it, as Apache Kafka does for a topic with
// message.timestamp.type=LogAppendTime: kfake keeps producers'
// timestamps whatever the topic's config says (and a batch that asks for
// its append time comes back with a CRC that no longer matches), so the
// control function moves the batch's timestamps to now, keeping the
// records' deltas, and sets its CRC again, before kfake reads it.
func appendTimeOn(t *testing.T, c *kfake.Cluster, topic string, id [16]byte) {
	t.Helper()
	castagnoli := crc32.MakeTable(crc32.Castagnoli)
	c.ControlKey(int16(kmsg.Produce), func(req kmsg.Request) (kmsg.Response, error, bool) {
		pr := req.(*kmsg.ProduceRequest)
		now := time.Now().UnixMilli()
		for i := range pr.Topics {
			if pt := &pr.Topics[i]; pt.Topic == topic || pt.TopicID == id {
				for j := range pt.Partitions {
					b := pt.Partitions[j].Records
					// A v2 batch: CRC-32C at [17:21] over [21:], first
					// and max timestamps at [27:35] and [35:43].
					if len(b) < 61 || b[16] != 2 {
						continue
					}
					first, maxTs := int64(be.BigEndian.Uint64(b[27:35])), int64(be.BigEndian.Uint64(b[35:43]))
					be.BigEndian.PutUint64(b[27:35], uint64(now))
					be.BigEndian.PutUint64(b[35:43], uint64(now+maxTs-first))
					be.BigEndian.PutUint32(b[17:21], crc32.Checksum(b[21:], castagnoli))
				}
			}
		}
		return nil, nil, false // kfake handles the request, with the batch changed
	})
}

// TestLogAppendTimeCopiesShareIdentity: on a commands topic whose broker
// stamps records with their append time (message.timestamp.type=
// LogAppendTime), a misrouted rejoin without at_ns was re-published with
// no boundary of its own, so each copy's boundary was the time the broker
// appended that copy. A second copy of the same command (the outbox
// produces it again when the processor crashes between re-publishing and
// committing; the test produces the copy again itself, as that would)
// was a new command with a later boundary: after the user left again, it
// closed the new leave, and the user who left was active. Every copy must
// carry the original's boundary, so that every copy has one identity and
// the second is a duplicate (rule C5).
func TestLogAppendTimeCopiesShareIdentity(t *testing.T) {
	const parts = 2
	c := privateBroker(t)
	e := envOn(t, c, parts)
	td, err := e.adm.ListTopics(e.ctx(30*time.Second), string(e.set.Commands))
	if err != nil {
		t.Fatal(err)
	}
	appendTimeOn(t, c, string(e.set.Commands), td[string(e.set.Commands)].ID)
	pr := e.start(t.TempDir(), e.configOn(c))
	pr.waitReady(t, parts)

	const user = 42
	key := topics.AppendUserID(nil, user)
	own := murmur2Partition(key, parts)
	// Records go to the partition the test names.
	pcl, err := kgo.NewClient(kgo.SeedBrokers(c.ListenAddrs()...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer pcl.Close()
	produce := func(r *kgo.Record) *kgo.Record {
		t.Helper()
		if err := pcl.ProduceSync(e.ctx(30*time.Second), r).FirstErr(); err != nil {
			t.Fatalf("produce: %v", err)
		}
		return r
	}
	cmd := func(c topics.Command, partition int32) *kgo.Record {
		return produce(&kgo.Record{Topic: string(e.set.Commands), Partition: partition, Key: key, Value: topics.AppendCommand(nil, c)})
	}

	leave := cmd(topics.Command{Op: topics.Leave, UserID: user, AtNs: uint64(time.Now().Add(-time.Minute).UnixNano()), HasAt: true, RequestID: "leave-1"}, own)
	if rec := e.waitLatest(c, user, leave.Offset); rec.Status != "left" {
		t.Fatalf("after the leave: %+v", rec)
	}

	// The rejoin, without at_ns, in the other partition: the processor
	// re-publishes it to the user's own, where it closes the leave.
	misrouted := cmd(topics.Command{Op: topics.Rejoin, UserID: user, RequestID: "rejoin-1"}, 1-own)
	var copy1 *kgo.Record
	eventually(t, 60*time.Second, func() error {
		for _, r := range e.readOn(c, e.set.Commands) {
			if r.Partition == own && headerOf(r, topics.HeaderMisroutedFrom) == fmt.Sprintf("%d/%d", misrouted.Partition, misrouted.Offset) {
				copy1 = r
				return nil
			}
		}
		return fmt.Errorf("no copy of the misrouted rejoin in partition %d yet", own)
	})
	if rec := e.waitLatest(c, user, copy1.Offset); rec.Status != "active" {
		t.Fatalf("after the re-published rejoin: %+v", rec)
	}

	// The user leaves again, after the rejoin took effect.
	again := cmd(topics.Command{Op: topics.Leave, UserID: user, AtNs: uint64(time.Now().UnixNano()), HasAt: true, RequestID: "leave-2"}, own)
	if rec := e.waitLatest(c, user, again.Offset); rec.Status != "left" {
		t.Fatalf("after the second leave: %+v", rec)
	}

	// The rejoin's copy, produced again as the outbox would after a
	// crash: same key, value and headers, to the same partition. The
	// broker stamps it with a later append time than the first copy.
	copy2 := produce(&kgo.Record{Topic: copy1.Topic, Partition: own, Key: copy1.Key, Value: copy1.Value, Headers: copy1.Headers})
	rec := e.waitLatest(c, user, copy2.Offset)
	for _, r := range e.readOn(c, e.set.Commands) {
		if r.Partition == own && r.Offset == copy2.Offset {
			copy2 = r
		}
	}
	t.Logf("copies of the rejoin appended at %d and %d ms; their value %s", copy1.Timestamp.UnixMilli(), copy2.Timestamp.UnixMilli(), copy1.Value)
	if !copy2.Timestamp.After(copy1.Timestamp) {
		t.Fatalf("the broker did not stamp the copies with their append times: %v, %v", copy1.Timestamp, copy2.Timestamp)
	}
	if rec.Status != "left" || rec.Command.Changed || !rec.Command.Duplicate {
		t.Fatalf("the rejoin's second copy was applied as a new command: the user who left again is %s (record %+v, command %+v)",
			rec.Status, rec, *rec.Command)
	}
}

// headerOf returns the value of r's header key, or "".
func headerOf(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// waitCommittedOn waits until the group's committed offsets reach the end
// of every partition of the signals topic: every signal produced so far
// was decided, and the cycle that decided it committed. Only for topics
// the processor writes no transaction markers to (no misrouted signal).
func (e *env) waitCommittedOn() {
	e.t.Helper()
	eventually(e.t, 60*time.Second, func() error {
		ctx := e.ctx(10 * time.Second)
		ends, err := e.adm.ListEndOffsets(ctx, string(e.set.Signals))
		if err != nil {
			return err
		}
		committed, err := e.adm.FetchOffsets(ctx, e.group)
		if err != nil {
			return err
		}
		var behind error
		ends.Each(func(o kadm.ListedOffset) {
			if c, ok := committed.Lookup(o.Topic, o.Partition); o.Offset > 0 && (!ok || c.At < o.Offset) {
				behind = fmt.Errorf("signals partition %d: committed %d of %d", o.Partition, c.At, o.Offset)
			}
		})
		return behind
	})
}

// TestTombstoneNeverReactivates: a tombstone on the changelog (a record
// with the user's key and no value, written by a purge job or an
// operator) makes compaction remove the user's earlier records, and,
// once delete.retention.ms has passed, the tombstone too. A new owner
// with an empty data dir restores the partition's users from the
// changelog; a restore must never turn a user who left into an active
// one:
//
//   - while the tombstone is there it is the user's latest record, which
//     carries no restore header: the new owner replays the commands
//     (this held before);
//   - once compaction removed the tombstone too, nothing in the
//     changelog named the user, and the new owner restored the others
//     and took the user who had left for one who never did, forwarding
//     the user's signals. The restore now checks every leave below the
//     judged offset against the users it restores, and replays when one
//     has no record.
//
// kfake compacts when told to (Cluster.Compact), as Apache Kafka's
// cleaner does once the segments roll, here with delete.retention.ms
// either 0 (the tombstone goes in the same pass) or a day. It moves a
// partition's start to its first record kept, where Kafka keeps the
// start of a compacted log at 0: a record under a key that is no user,
// written first and never superseded, keeps the start at 0 as Kafka
// would (a start above 0 is a reason to replay of its own).
func TestTombstoneNeverReactivates(t *testing.T) {
	for _, tc := range []struct {
		name            string
		deleteRetention string
		tombstoneStays  bool
	}{
		{"tombstone kept", "86400000", true},
		{"tombstone compacted away", "0", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			testTombstone(t, tc.deleteRetention, tc.tombstoneStays)
		})
	}
}

func testTombstone(t *testing.T, deleteRetention string, tombstoneStays bool) {
	const parts = 1
	c := privateBroker(t)
	e := envOn(t, c, parts)
	changelog := string(e.set.Changelog)
	if _, err := e.adm.AlterTopicConfigs(e.ctx(30*time.Second), []kadm.AlterConfig{
		{Op: kadm.SetConfig, Name: "delete.retention.ms", Value: kadm.StringPtr(deleteRetention)},
	}, changelog); err != nil {
		t.Fatal(err)
	}
	filler := func(name string) {
		e.produce(&kgo.Record{Topic: changelog, Key: []byte(name), Value: []byte("not a user")})
	}
	filler("keeps-the-start")

	a := e.start(t.TempDir(), e.configOn(c))
	a.waitReady(t, parts)
	const gone = 7 // left; its records are tombstoned and compacted away
	left := time.Now().Add(-time.Minute)
	e.command(topics.Leave, gone, left)
	for u := uint64(1); u <= 5; u++ {
		e.command(topics.Leave, u, left)
		if u%2 == 0 {
			e.command(topics.Rejoin, u, left.Add(time.Second))
		}
	}
	e.signal(1000, time.Now(), "judge") // decided once the commands are: the group commits how far they were judged
	e.waitCommittedOn()
	if rec, ok := e.latestOf(c, gone); !ok || rec.Status != "left" {
		t.Fatalf("user %d before the tombstone: %+v (found %v)", gone, rec, ok)
	}
	if err := a.stop(t); err != nil {
		t.Fatalf("a: %v", err)
	}

	e.produce(&kgo.Record{Topic: changelog, Key: topics.AppendUserID(nil, gone)}) // the tombstone
	filler("after-the-tombstone")                                                 // the active segment, never compacted
	c.Compact()
	var kept []string
	for _, r := range e.readOn(c, e.set.Changelog) {
		if string(r.Key) == fmt.Sprint(gone) {
			kept = append(kept, fmt.Sprintf("offset %d value %q", r.Offset, r.Value))
		}
	}
	if want := map[bool]int{true: 1, false: 0}[tombstoneStays]; len(kept) != want || (want == 1 && !strings.Contains(kept[0], `value ""`)) {
		t.Fatalf("compaction left records %v of user %d; want the tombstone %v", kept, gone, tombstoneStays)
	}
	starts, err := e.adm.ListStartOffsets(e.ctx(30*time.Second), changelog)
	if err != nil {
		t.Fatal(err)
	}
	if s, _ := starts.Lookup(changelog, 0); s.Offset != 0 {
		t.Fatalf("the compacted changelog starts at %d", s.Offset)
	}

	cfg := e.configOn(c)
	handovers := make(chan fanout.HandoverInfo, parts)
	cfg.EventListener.Handover = func(i fanout.HandoverInfo) { handovers <- i }
	b := e.start(t.TempDir(), cfg)
	b.waitReady(t, parts)
	h := <-handovers
	t.Logf("new owner: %v", h)

	e.signal(gone, time.Now(), "left-user-7")
	e.signal(1, time.Now(), "left-user-1")
	e.signal(2, time.Now(), "active-user-2")
	e.waitCommittedOn()
	var forwarded []string
	for _, r := range e.readOn(c, e.set.Cohort) {
		forwarded = append(forwarded, string(r.Value))
	}
	if fmt.Sprint(forwarded) != "[judge active-user-2]" {
		t.Fatalf("forwarded %q, want [judge active-user-2]: user %d, who left, was restored as active (%v)", forwarded, gone, h)
	}
	if h.Source != "replay" {
		t.Fatalf("new owner: %v, want a replay", h)
	}
}

// TestHistoryOmittedAfterCompaction: a changelog record too large for
// the topic leaves out the user's oldest episodes and counts them in
// history_omitted. The record said they were "in the user's earlier
// records"; compaction keeps only the latest record of a user, so once it
// ran no record held them. What holds instead, and what docs/client.md
// and the record's documentation now say: the omitted episodes are the
// oldest closed ones, which held no forwarded signal of the user outside
// its late-leave windows, and every window stays in the record (pkg/fanout
// TestTrimChangelog); the owner's store keeps the whole history, and an
// owner without it rebuilds it from the commands (a trimmed record
// carries no restore header, so a new owner replays).
func TestHistoryOmittedAfterCompaction(t *testing.T) {
	const parts = 1
	c := privateBroker(t)
	e := envOn(t, c, parts)
	changelog := string(e.set.Changelog)
	if _, err := e.adm.AlterTopicConfigs(e.ctx(30*time.Second), []kadm.AlterConfig{
		{Op: kadm.SetConfig, Name: "max.message.bytes", Value: kadm.StringPtr("6000")},
	}, changelog); err != nil {
		t.Fatal(err)
	}
	filler := func(name string) {
		e.produce(&kgo.Record{Topic: changelog, Key: []byte(name), Value: []byte("not a user")})
	}
	filler("keeps-the-start") // see TestTombstoneNeverReactivates

	a := e.start(t.TempDir(), e.configOn(c))
	a.waitReady(t, parts)
	const user, episodes = 9, 120
	t0 := base()
	for i := range episodes {
		at := t0.Add(time.Duration(i) * 10 * time.Millisecond)
		e.command(topics.Leave, user, at)
		e.command(topics.Rejoin, user, at.Add(5*time.Millisecond))
	}
	last := e.command(topics.Leave, user, t0.Add(episodes*10*time.Millisecond))
	rec := e.waitLatest(c, user, last.Offset)
	if rec.Status != "left" || rec.HistoryOmitted == 0 || rec.HistoryOmitted+len(rec.History) != episodes {
		t.Fatalf("latest record: status %s, %d episodes and %d omitted; want left, %d in all, some omitted",
			rec.Status, len(rec.History), rec.HistoryOmitted, episodes)
	}
	e.signal(1000, time.Now(), "judge")
	e.waitCommittedOn()
	if err := a.stop(t); err != nil {
		t.Fatalf("a: %v", err)
	}

	filler("the-active-segment")
	c.Compact()
	held := make(map[uint64]bool) // episode starts some record of the user holds
	records := 0
	for _, r := range e.readOn(c, e.set.Changelog) {
		if u, err := topics.ParseUserID(r.Key); err != nil || u != user {
			continue
		}
		records++
		rec, err := topics.DecodeMemberRecord(r.Value)
		if err != nil {
			t.Fatal(err)
		}
		for _, ep := range rec.History {
			held[ep.LeftAtNs] = true
		}
	}
	t.Logf("after compaction: %d records of the user hold %d of its %d episodes", records, len(held), episodes)
	if records != 1 || len(held) != episodes-rec.HistoryOmitted {
		t.Fatalf("after compaction %d records hold %d episodes; want the latest alone, with %d", records, len(held), episodes-rec.HistoryOmitted)
	}

	// A new owner replays (the trimmed record has no restore header) and
	// holds the whole history again.
	cfg := e.configOn(c)
	handovers := make(chan fanout.HandoverInfo, parts)
	cfg.EventListener.Handover = func(i fanout.HandoverInfo) { handovers <- i }
	dir := t.TempDir()
	b := e.start(dir, cfg)
	b.waitReady(t, parts)
	if h := <-handovers; h.Source != "replay" {
		t.Fatalf("new owner: %v, want a replay", h)
	}
	if err := b.stop(t); err != nil {
		t.Fatalf("b: %v", err)
	}
	store, err := membership.Open(dir, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	var got []membership.Episode
	if err := store.Export(func(u uint64, d []byte) error {
		if u == user {
			dump, err := membership.DecodeDump(d)
			if err != nil {
				return err
			}
			got = dump.Member.History
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(got) != episodes || got[0].LeftAtNs != uint64(t0.UnixNano()) {
		t.Fatalf("the new owner's store holds %d episodes of the user (first %+v), want all %d", len(got), got, episodes)
	}
}

// copyTree copies the regular files and directories under src to dst, as
// cp -r or a file-level backup would.
func copyTree(t *testing.T, src, dst string) {
	t.Helper()
	err := filepath.WalkDir(src, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(src, path)
		if err != nil {
			return err
		}
		to := filepath.Join(dst, rel)
		switch {
		case d.IsDir():
			return os.MkdirAll(to, 0o755)
		case d.Type().IsRegular():
			b, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			return os.WriteFile(to, b, 0o644)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestCopiedDataDirIsRefused: without --transactional-id, an instance's
// transactional ID is kept in its data dir, so a second processor started
// on a copy of the dir had the same one. Each start of a session fences
// the other's, which replaces its own and fences back: both end their
// transactions with an unknown outcome, over and over. The copy is now
// refused at start, with what to do; the original runs on.
func TestCopiedDataDirIsRefused(t *testing.T) {
	const parts = 2
	e := newEnv(t, parts)
	orig := filepath.Join(t.TempDir(), "data")
	first := e.runBinary(orig)
	first.waitReady(t)
	first.stop(t)
	cp := filepath.Join(t.TempDir(), "copy")
	copyTree(t, orig, cp)

	first = e.runBinary(orig)
	first.waitReady(t)
	second := e.runBinary(cp)
	unknown := func(b *binary) string { // "-" while it serves no metrics
		code, body, err := b.get("/metrics")
		if err != nil || code != 200 {
			return "-"
		}
		for _, line := range strings.Split(body, "\n") {
			if v, ok := strings.CutPrefix(line, `cohortgate_transactions_total{outcome="unknown"} `); ok {
				return v
			}
		}
		return "0"
	}
	var exit error
	eventually(t, 60*time.Second, func() error {
		select {
		case exit = <-second.exited:
			return nil
		default:
		}
		for p := range int32(parts) { // signals keep transactions going
			e.produce(&kgo.Record{Topic: string(e.set.Signals), Partition: p, Key: topics.AppendUserID(nil, uint64(p)), Value: []byte("s")})
		}
		u1, u2 := unknown(first), unknown(second)
		return fmt.Errorf("a second processor runs on a copy of the first's data dir; transactions ended with an unknown outcome: %s by the first, %s by the second", u1, u2)
	})
	if exit == nil || !strings.Contains(second.stderr.String(), "looks like a copy") {
		t.Fatalf("the processor on the copy exited with %v, saying:\n%s", exit, second.stderr.String())
	}
	t.Logf("the copy was refused: %s", strings.TrimSpace(second.stderr.String()))
	first.waitReady(t)
}

// TestFiguresRestoreLeaverCheck prints what the restore's check of the
// users who left (TestTombstoneNeverReactivates) costs beside the
// changelog read: COHORTGATE_FIGURES_USERS users with a leave and a
// rejoin each, on an embedded broker of the test's own, restored by five
// empty owners in turn. It checks nothing; without the variable it is
// skipped.
//
//	COHORTGATE_FIGURES_USERS=100000 go test -run TestFiguresRestoreLeaverCheck -v ./integration/
func TestFiguresRestoreLeaverCheck(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("COHORTGATE_FIGURES_USERS"))
	if n <= 0 {
		t.Skip("COHORTGATE_FIGURES_USERS is not set")
	}
	c := privateBroker(t)
	e := envOn(t, c, 1)
	t0 := time.Now().Add(-time.Hour)
	var batch []*kgo.Record
	for u := range n {
		for i, op := range []topics.Op{topics.Leave, topics.Rejoin} {
			cmd := topics.Command{Op: op, UserID: uint64(u), AtNs: uint64(t0.Add(time.Duration(i) * time.Second).UnixNano()), HasAt: true, RequestID: "m"}
			batch = append(batch, &kgo.Record{Topic: string(e.set.Commands), Key: topics.AppendUserID(nil, uint64(u)), Value: topics.AppendCommand(nil, cmd)})
		}
		if len(batch) >= 10000 {
			e.produce(batch...)
			batch = batch[:0]
		}
	}
	e.produce(batch...)
	a := e.start(t.TempDir(), e.configOn(c))
	a.waitReady(t, 1)
	e.signal(1<<40, time.Now(), "judge")
	e.waitCommittedOn()
	if err := a.stop(t); err != nil {
		t.Fatal(err)
	}
	for range 5 {
		cfg := e.configOn(c)
		hs := make(chan fanout.HandoverInfo, 1)
		cfg.EventListener.Handover = func(i fanout.HandoverInfo) { hs <- i }
		b := e.start(t.TempDir(), cfg)
		b.waitReady(t, 1)
		h := <-hs
		t.Logf("%s: %d users, %d records: read %v, leavers checked %v, written %v, took %v", h.Source, h.Users, h.Records,
			h.Read.Round(time.Millisecond), h.Checked.Round(time.Millisecond), h.Written.Round(time.Millisecond), h.Took.Round(time.Millisecond))
		if err := b.stop(t); err != nil {
			t.Fatal(err)
		}
	}
}
