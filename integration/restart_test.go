package integration

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cohortgate/cohortgate/pkg/fanout"
	"github.com/cohortgate/cohortgate/topics"
)

// TestRestartAfterCommandsAlone: a run that sees commands and no signal
// (a bulk leave job) still commits how far it judged the commands, so the
// next start reads them from the store's checkpoint and applies none of
// them again, instead of replaying the partition from the offset an
// earlier run judged (0 when none did). Whether or not the group ever
// committed a signals offset. The state after the restarts equals a
// replay's.
func TestRestartAfterCommandsAlone(t *testing.T) {
	for _, tc := range []struct {
		name string
		// signalsFirst: a first run decides a signal on each partition,
		// so the group has committed offsets when the commands-only run
		// starts.
		signalsFirst bool
	}{
		{"no signal ever", false},
		{"signals before", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, 2)
			dir := t.TempDir()
			cfg := e.config()
			t0 := base()
			const users = 20
			if tc.signalsFirst {
				first := e.start(dir, cfg)
				first.waitReady(t, 2)
				for u := uint64(1); u <= users; u++ {
					e.signal(u, t0, "before")
				}
				e.waitDecided()
				if err := first.stop(t); err != nil {
					t.Fatalf("first run: %v", err)
				}
			}

			// The commands-only run: leaves, no signal. Its store is
			// ahead of its applied offsets until each batch's sync
			// ends; CommandApplied follows them.
			var bulkApplied atomic.Int64
			bulkCfg := cfg
			bulkCfg.EventListener.CommandApplied = func(fanout.CommandInfo) { bulkApplied.Add(1) }
			bulk := e.start(dir, bulkCfg)
			bulk.waitReady(t, 2)
			for u := uint64(1); u <= users; u++ {
				e.command(topics.Leave, u, t0.Add(time.Duration(u)*time.Second))
			}
			eventually(t, 30*time.Second, func() error {
				if n := bulkApplied.Load(); n < users {
					return fmt.Errorf("%d of %d commands applied", n, users)
				}
				return nil
			})
			if err := bulk.stop(t); err != nil {
				t.Fatalf("commands-only run: %v", err)
			}

			// The restart applies no command again.
			var applied atomic.Int64
			again := cfg
			again.EventListener.CommandApplied = func(fanout.CommandInfo) { applied.Add(1) }
			restart := e.start(dir, again)
			restart.waitReady(t, 2)
			if n := applied.Load(); n != 0 {
				t.Errorf("the restart after commands alone applied %d commands again, want 0 (read from the store's checkpoint)", n)
			}
			got := membersOf(t, restart, users)
			if err := restart.stop(t); err != nil {
				t.Fatalf("restart: %v", err)
			}

			want := replayMembers(t, e, cfg, users)
			if !reflect.DeepEqual(got, want) {
				t.Errorf("after the restart: %+v\nreplay: %+v", got, want)
			}
		})
	}
}

// membersOf is the state of users 1..n on pr, which owns every partition.
func membersOf(t *testing.T, pr *proc, n uint64) map[uint64]propState {
	t.Helper()
	out := make(map[uint64]propState)
	for u := uint64(1); u <= n; u++ {
		m, err := pr.Member(u)
		if err != nil {
			t.Fatalf("user %d: %v", u, err)
		}
		out[u] = stateOf(m)
	}
	return out
}

// replayMembers is the state of users 1..n after a replay of e's commands
// from offset 0: a fresh group, changelog, cohort and DLQ, an empty data
// dir.
func replayMembers(t *testing.T, e *env, cfg fanout.Config, n uint64) map[uint64]propState {
	t.Helper()
	suffix := "-replay"
	cfg.Group += suffix
	cfg.TransactionalID += suffix
	cfg.GateSnapshot = ""
	cfg.Topics.Cohort = topics.Topic(string(cfg.Topics.Cohort) + suffix)
	cfg.Topics.DLQ = topics.Topic(string(cfg.Topics.DLQ) + suffix)
	cfg.Topics.Changelog = topics.Topic(string(cfg.Topics.Changelog) + suffix)
	t.Cleanup(func() {
		ctx := e.ctx(30 * time.Second)
		_, _ = e.adm.DeleteTopics(ctx, string(cfg.Topics.Cohort), string(cfg.Topics.DLQ), string(cfg.Topics.Changelog))
		_, _ = e.adm.DeleteGroup(ctx, cfg.Group)
	})
	replay := e.start(t.TempDir(), cfg)
	replay.waitReady(t, int(e.parts))
	out := membersOf(t, replay, n)
	if err := replay.stop(t); err != nil {
		t.Fatalf("replay: %v", err)
	}
	return out
}

// TestCrashRestartEqualsReplay: processor binaries that write the gate
// snapshot while running (every 100 ms) are killed with SIGKILL at random
// points of a stream of leaves and rejoins, and started again on the same
// data dir; the last start, in this process, loads the snapshot the kills
// left, older than the store, and applies the commands since it again.
// Its state equals a replay's, and its gate decides signals as the
// replay's episodes say.
func TestCrashRestartEqualsReplay(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 0xc4a5))
	e := newEnv(t, 2)
	dir := t.TempDir()
	t0 := base()
	const users = 12
	at := func() time.Time { return t0.Add(time.Duration(rng.IntN(20_000)) * time.Millisecond) }
	commands := func(n int) {
		for range n {
			op := topics.Leave
			if rng.IntN(3) == 0 {
				op = topics.Rejoin
			}
			e.command(op, 1+rng.Uint64N(users), at())
		}
	}
	const rounds = 4
	for round := range rounds {
		// A short session: the group gives a killed member's partitions
		// to the next start only once its session expires.
		b := e.runBinary(dir, "--gate-snapshot-interval", "100ms", "--session-timeout", "6s")
		b.waitReady(t)
		commands(10 + rng.IntN(20))
		if round == rounds-1 {
			// The last kill leaves a snapshot written while running and
			// commands applied after it.
			eventually(t, 60*time.Second, func() error {
				if !strings.Contains(b.stderr.String(), "wrote gate snapshot while running") {
					return errors.New("no gate snapshot written while running yet")
				}
				return nil
			})
			commands(5 + rng.IntN(10))
		}
		time.Sleep(time.Duration(rng.IntN(400)) * time.Millisecond) // a random point of the stream: any is right
		if err := b.cmd.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		<-b.exited
	}

	var ev restarts
	cfg := e.config()
	cfg.GateSnapshot = filepath.Join(dir, "gate.snapshot")
	ev.listen(&cfg)
	after := e.start(filepath.Join(dir, "membership"), cfg) // where the binary keeps its store
	after.waitReady(t, 2)
	if src := ev.source(t); src != "snapshot" {
		t.Errorf("the start after the kills restored from the %s, want the snapshot written while running (fallback %v)",
			src, ev.restored[0].Fallback)
	}
	t.Logf("restored %v; commands applied again, by partition: %v", ev.restored[0], ev.restored[0].Regate)
	got := membersOf(t, after, users)
	want := replayMembers(t, e, cfg, users)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("after the kills: %+v\nreplay: %+v", got, want)
	}

	// The gate: every user's signals at event times across the range of
	// the boundaries, forwarded as the replay's episodes allow.
	var sigs []sig
	for u := uint64(1); u <= users; u++ {
		for ms := -500; ms <= 20_500; ms += 250 {
			d := time.Duration(ms) * time.Millisecond
			sigs = append(sigs, sig{user: u, at: d, forward: allows(want[u], uint64(t0.Add(d).UnixNano()))})
		}
	}
	wantFwd := e.produceSignals(t0, sigs)
	e.waitDecided()
	if gotFwd := e.forwardedValues(); !slices.Equal(gotFwd, wantFwd) {
		t.Errorf("forwarded %d signals, want %d: the gate after the kills is not the replay's", len(gotFwd), len(wantFwd))
	}
	if err := after.stop(t); err != nil {
		t.Fatal(err)
	}
	// A kill in the middle of a write left its temporary file; the write
	// at the stop removed it.
	if left, _ := filepath.Glob(cfg.GateSnapshot + ".tmp-*"); len(left) > 0 {
		t.Errorf("temporary snapshot files left after the stop: %v", left)
	}
}

// allows says whether a signal at ts passes a user in state s.
func allows(s propState, ts uint64) bool {
	if s.Status == "left" && ts >= s.LeftAt {
		return false
	}
	for _, ep := range s.History {
		if ep.LeftAtNs <= ts && ts < ep.RejoinedAtNs {
			return false
		}
	}
	return true
}

// TestSnapshotWhileRunningAfterABurst: commands that come in one burst
// and then stop still get their gate snapshot written while running, once
// the interval has passed. The snapshot was written only between two
// batches, so a burst applied within one interval, followed by quiet, left
// the gate unsaved until the next command came: a crash meanwhile cost a
// replay of everything since the previous snapshot.
func TestSnapshotWhileRunningAfterABurst(t *testing.T) {
	e := newEnv(t, 2)
	dir := t.TempDir()
	cfg := e.config()
	cfg.GateSnapshot = filepath.Join(dir, "gate.snapshot")
	cfg.GateSnapshotInterval = 200 * time.Millisecond
	var ev restarts
	ev.listen(&cfg)
	pr := e.start(dir, cfg)
	pr.waitReady(t, 2)
	t0 := base()
	for u := uint64(1); u <= 3; u++ {
		e.command(topics.Leave, u, t0.Add(time.Duration(u)*time.Second))
	}
	eventually(t, 20*time.Second, func() error {
		ev.mu.Lock()
		defer ev.mu.Unlock()
		for _, s := range ev.saved {
			if s.Running && s.Err == nil && s.Members == 3 {
				return nil
			}
		}
		return fmt.Errorf("no gate snapshot of the 3 leavers written while running (%d written)", len(ev.saved))
	})
	if err := pr.stop(t); err != nil {
		t.Fatal(err)
	}
}
