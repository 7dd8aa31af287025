package integration

import (
	"bytes"
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/pkg/fanout"
	"github.com/cohortgate/cohortgate/pkg/membership"
	"github.com/cohortgate/cohortgate/topics"
)

// TestHandoverFromChangelogEqualsReplay: an instance with an empty data
// dir takes over every partition after the first instance stopped, once
// restoring the users from the changelog (the default) and once replaying
// the commands from offset 0 (HandoverReplay), on the same input with
// commands added in between that come again (a leave after its rejoin, a
// refused rejoin after the leave moved back). Both stores must hold the
// same bytes: states, histories, windows, identities and checkpoints, and
// notes that name the same commands (their receipts say when each run
// applied them, which differs). The restores report how far their reads
// are (RestoreProgress).
func TestHandoverFromChangelogEqualsReplay(t *testing.T) {
	const parts = 2
	e := newEnv(t, parts)
	t0 := base()
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	cmd := func(op topics.Op, user uint64, ms int, rid string) {
		c := topics.Command{Op: op, UserID: user, AtNs: uint64(at(ms).UnixNano()), HasAt: true, RequestID: rid}
		e.produce(&kgo.Record{Topic: string(e.set.Commands), Key: topics.AppendUserID(nil, user), Value: topics.AppendCommand(nil, c)})
	}

	a := e.start(t.TempDir(), e.config())
	a.waitReady(t, parts)
	for u := uint64(1); u <= 40; u++ {
		cmd(topics.Leave, u, 100, "a")
		if u%2 == 0 {
			cmd(topics.Rejoin, u, 200, "")
		}
		if u%5 == 0 {
			cmd(topics.Rejoin, u, 50, "refused") // before the leave: refused, remembered
		}
	}
	// A signal per partition, decided once the commands are: the group
	// commits how far they were judged.
	for p, u := int32(0), uint64(1000); p < parts; u++ {
		if murmur2Partition(topics.AppendUserID(nil, u), parts) == p {
			e.signal(u, time.Now(), fmt.Sprint("judge-", p))
			p++
		}
	}
	e.waitDecided()
	if err := a.stop(t); err != nil {
		t.Fatalf("a: %v", err)
	}
	for u := uint64(1); u <= 40; u++ {
		switch {
		case u%2 == 0:
			cmd(topics.Leave, u, 100, "a") // again, after the rejoin: a duplicate
		case u%5 == 0:
			cmd(topics.Leave, u, 40, "")         // moves the boundary back
			cmd(topics.Rejoin, u, 50, "refused") // again: a duplicate, not a close
		}
	}

	var progress []fanout.RestoreProgressInfo
	// take is a new instance's takeover of every partition, restoring or
	// replaying; with clk, the instance's wall clock is clk, stepped an
	// hour back and forth at each report of the restore's progress.
	var steppedReads atomic.Int64
	take := func(replay bool, clk *steppedClock) (map[uint64][]byte, []fanout.HandoverInfo) {
		cfg := e.config()
		cfg.Testing.HandoverReplay = replay
		var mu sync.Mutex
		var hs []fanout.HandoverInfo
		var steps int
		if clk != nil {
			cfg.Now = clk.now
		}
		cfg.EventListener.Handover = func(i fanout.HandoverInfo) {
			mu.Lock()
			defer mu.Unlock()
			hs = append(hs, i)
		}
		cfg.EventListener.RestoreProgress = func(i fanout.RestoreProgressInfo) {
			mu.Lock()
			defer mu.Unlock()
			if clk != nil {
				steppedReads.Add(clk.reads.Load())
				clk.step([]time.Duration{-time.Hour, time.Hour, 0}[steps%3])
				steps++
				return
			}
			progress = append(progress, i)
		}
		dir := t.TempDir()
		p := e.start(dir, cfg)
		p.waitReady(t, parts)
		if err := p.stop(t); err != nil {
			t.Fatalf("stop: %v", err)
		}
		store, err := membership.Open(dir, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer store.Close()
		out := make(map[uint64][]byte)
		if err := store.Export(func(u uint64, d []byte) error {
			out[u] = bytes.Clone(d)
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		cps, err := store.Checkpoints(string(e.set.Commands))
		if err != nil {
			t.Fatal(err)
		}
		out[^uint64(0)] = []byte(fmt.Sprint(cps))
		mu.Lock()
		defer mu.Unlock()
		return out, hs
	}
	restored, hs := take(false, nil)
	for _, h := range hs {
		if h.Source != "changelog" {
			t.Fatalf("restore: partition %d replayed: %v", h.Partition, h.Reason)
		}
	}
	if len(hs) != parts {
		t.Fatalf("restore: %d handovers, want %d", len(hs), parts)
	}
	// Each restore said how far its reads were, at their end at least:
	// every offset of the changelog partition read, bytes fetched of the
	// partition's size on the broker (DescribeLogDirs).
	read := make(map[int32]fanout.RestoreProgressInfo)
	for _, p := range progress {
		if p.Phase == "reading the changelog" && p.Records == p.RecordsTotal {
			read[p.Partition] = p
		}
	}
	for p := range int32(parts) {
		if r, ok := read[p]; !ok || r.Records == 0 || r.Bytes <= 0 || r.BytesTotal <= 0 {
			t.Errorf("partition %d: progress at the end of the changelog read %+v (of %+v); want records, bytes and the size", p, r, progress)
		}
	}
	replayed, hs := take(true, nil)
	if len(hs) != parts || hs[0].Source != "replay" {
		t.Fatalf("replay: handovers %+v", hs)
	}

	sameStores(t, "restored", restored, replayed)

	// The wall clock stepped an hour back and forth while the partitions
	// are restored: what they hold is still the replay's (the boundaries
	// are the producers' clocks, never the processor's).
	var clk steppedClock
	stepped, hs := take(false, &clk)
	if len(hs) != parts || hs[0].Source != "changelog" {
		t.Fatalf("restore under clock steps: handovers %+v", hs)
	}
	t.Logf("%d readings of the stepped clock during the restores", steppedReads.Load()+clk.reads.Load())
	sameStores(t, "restored under clock steps", stepped, replayed)
}

// sameStores fails unless got holds what want holds (see sameDump), and
// the same checkpoints (under key ^0).
func sameStores(t *testing.T, what string, got, want map[uint64][]byte) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s %d users and checkpoints, replayed %d", what, len(got), len(want))
	}
	for u, w := range want {
		g := got[u]
		if u == ^uint64(0) {
			if !bytes.Equal(g, w) {
				t.Fatalf("checkpoints: %s %s, replayed %s", what, g, w)
			}
			continue
		}
		if err := sameDump(g, w); err != nil {
			t.Errorf("%s, user %d: %v", what, u, err)
		}
	}
}

// dumpIdentityLen is the bytes of one command identity in a dump: a
// 16-byte digest, the u64 order it was remembered in, and a byte of flags
// (refused).
const dumpIdentityLen = 16 + 8 + 1

// dumpIdentities returns the identities dump d (decoded as dd) holds: they
// end it, in digest order.
func dumpIdentities(d []byte, dd membership.Dump) []byte {
	return d[len(d)-dumpIdentityLen*dd.Identities:]
}

// sameDump compares two dumps of a user: the member's state, history and
// windows, the identities byte for byte, and the notes but for their
// receipts' clock and signals offsets.
func sameDump(got, want []byte) error {
	g, err := membership.DecodeDump(got)
	if err != nil {
		return err
	}
	w, err := membership.DecodeDump(want)
	if err != nil {
		return err
	}
	gn, wn := g.Member.Note, w.Member.Note
	g.Member.Note, w.Member.Note = nil, nil
	if !reflect.DeepEqual(g.Member, w.Member) {
		return fmt.Errorf("restored %+v, replayed %+v", g.Member, w.Member)
	}
	if g.Identities != w.Identities || !bytes.Equal(dumpIdentities(got, g), dumpIdentities(want, w)) {
		return fmt.Errorf("identities differ: restored %d, replayed %d", g.Identities, w.Identities)
	}
	gNote, err := topics.DecodeNote(gn)
	if err != nil {
		return err
	}
	wNote, err := topics.DecodeNote(wn)
	if err != nil {
		return err
	}
	if !reflect.DeepEqual(gNote.Command, wNote.Command) {
		return fmt.Errorf("notes name %+v and %+v", gNote.Command, wNote.Command)
	}
	return nil
}
