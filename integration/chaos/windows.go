package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/integration/workload"
	"github.com/cohortgate/cohortgate/topics"
)

// noWindowRecovery is control-no-window-recovery's chaos: instance a,
// alone, records late-leave windows of the late-leave scenes' users; once
// it reports one, a is replaced by b (a fresh data dir: a new owner of
// every partition, with nothing of a's), and every user with a window
// gets a new leave (a new command, by rule C5, that changes nothing), so
// that b writes their changelog records. A b that does not recover the
// windows from the changelog writes them without: missing windows.
func (r *scenarioRun) noWindowRecovery(ctx context.Context) error {
	a, b := r.insts[0], r.insts[1]
	var users []uint64
	err := eventually(ctx, 120*time.Second, func() error {
		var err error
		if users, err = r.windowedUsers(ctx, a); err != nil {
			return err
		}
		if len(users) == 0 {
			return errors.New("no late-leave window yet")
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("waiting for %s to record a late-leave window: %w", a.name, err)
	}
	r.logf("%s recorded windows of users %v; replacing it by %s (%d signals produced)", a.name, users, b.name, r.produced.Load())
	if err := a.term(60 * time.Second); err != nil {
		r.finding("%v", err)
	}
	if err := b.start(); err != nil {
		return err
	}
	if err := r.settleOrRecover(ctx, "after replacing "+a.name+" by "+b.name); err != nil {
		return err
	}
	now := time.Now()
	for _, u := range users {
		rec := &kgo.Record{Topic: string(r.set.Commands), Key: topics.AppendUserID(nil, u), Timestamp: now,
			Value: topics.AppendCommand(nil, topics.Command{Op: topics.Leave, UserID: u, AtNs: uint64(now.UnixNano()), HasAt: true,
				RequestID: "chaos-after-handover"})}
		if err := r.h.cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
			return fmt.Errorf("producing a leave of user %d after the handover: %w", u, err)
		}
	}
	r.logf("a new leave for each of users %v, for %s to write their records", users, b.name)
	return nil
}

// windowedUsers returns the users of the plan's late-leave scenes for whom
// in reports a late-leave window (GET /v1/members/{user}: the user's
// changelog record).
func (r *scenarioRun) windowedUsers(ctx context.Context, in *instance) ([]uint64, error) {
	var out []uint64
	for _, s := range r.plan.Scenes {
		if s.Kind != workload.KindLateLeave {
			continue
		}
		for _, u := range s.Users {
			n, err := in.windows(ctx, u)
			if err != nil {
				return nil, err
			}
			if n > 0 {
				out = append(out, u)
			}
		}
	}
	return out, nil
}

// windows returns how many late-leave windows in reports for user; 0 for a
// user it does not know.
func (in *instance) windows(ctx context.Context, user uint64) (int, error) {
	code, body, err := in.get(ctx, "/v1/members/"+strconv.FormatUint(user, 10))
	switch {
	case err != nil:
		return 0, fmt.Errorf("%s: /v1/members/%d: %w", in.name, user, err)
	case code == http.StatusNotFound:
		return 0, nil
	case code != http.StatusOK:
		return 0, fmt.Errorf("%s: /v1/members/%d: %d %s", in.name, user, code, body)
	}
	var m struct {
		LateLeaves []json.RawMessage `json:"late_leaves"`
	}
	if err := json.Unmarshal(body, &m); err != nil {
		return 0, fmt.Errorf("%s: /v1/members/%d: %w", in.name, user, err)
	}
	return len(m.LateLeaves), nil
}
