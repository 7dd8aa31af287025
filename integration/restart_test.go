package integration

import (
	"fmt"
	"reflect"
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
