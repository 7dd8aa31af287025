package workload

import (
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/cohortgate/cohortgate/topics"
)

func TestPlanIsDeterministic(t *testing.T) {
	cfg := Config{Seed: 42, Users: 1000, Signals: 20000, ValueSize: 64, LeavePct: 5, RejoinPct: 1}
	a, err := NewPlan(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewPlan(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Fatal("two plans of one config differ")
	}
	cfg.Seed = 43
	c, err := NewPlan(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if reflect.DeepEqual(usersOf(a), usersOf(c)) || reflect.DeepEqual(a.Commands, c.Commands) {
		t.Fatal("plans of seeds 42 and 43 are the same")
	}
}

func TestPlanShape(t *testing.T) {
	for _, cfg := range []Config{
		{Seed: 1, Users: 1000, Signals: 20000, LeavePct: 5, RejoinPct: 1},
		{Seed: 2, Users: 100, Signals: 0, LeavePct: 50, RejoinPct: 50},
		{Seed: 3, Users: 10, Signals: 1, LeavePct: 100, RejoinPct: 30},
		{Seed: 4, Users: 5, Signals: 100, LeavePct: 0, RejoinPct: 0},
	} {
		p, err := NewPlan(cfg)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for seq, u := range p.SignalUsers() {
			if seq != n || u < 1 || u > uint64(cfg.Users) {
				t.Fatalf("%+v: signal %d (the %dth) has user %d", cfg, seq, n, u)
			}
			n++
		}
		if n != cfg.Signals {
			t.Fatalf("%+v: %d signals", cfg, n)
		}
		leaves := make(map[uint64][]Command)
		rejoins := make(map[uint64]Command)
		for i, c := range p.Commands {
			if c.Index != i {
				t.Fatalf("%+v: command %d has index %d", cfg, i, c.Index)
			}
			if i > 0 && c.Before < p.Commands[i-1].Before {
				t.Fatalf("%+v: command %d goes before %d, after a command before %d", cfg, i, c.Before, p.Commands[i-1].Before)
			}
			if c.Before < 0 || c.Before > cfg.Signals {
				t.Fatalf("%+v: command %d goes before %d", cfg, i, c.Before)
			}
			switch c.Op {
			case topics.Leave:
				if _, ok := rejoins[c.User]; ok {
					t.Fatalf("%+v: user %d leaves after rejoining", cfg, c.User)
				}
				leaves[c.User] = append(leaves[c.User], c)
			case topics.Rejoin:
				if len(leaves[c.User]) == 0 {
					t.Fatalf("%+v: user %d rejoins before leaving", cfg, c.User)
				}
				if _, ok := rejoins[c.User]; ok {
					t.Fatalf("%+v: user %d rejoins twice", cfg, c.User)
				}
				rejoins[c.User] = c
			default:
				t.Fatalf("%+v: command %d has op %v", cfg, i, c.Op)
			}
		}
		wantLeavers := int(math.Round(float64(cfg.Users) * cfg.LeavePct / 100))
		wantRejoiners := int(math.Round(float64(cfg.Users) * cfg.RejoinPct / 100))
		if len(leaves) != wantLeavers || p.Leavers() != wantLeavers || len(rejoins) != wantRejoiners {
			t.Fatalf("%+v: %d leavers (%d), %d rejoiners; want %d and %d", cfg, len(leaves), p.Leavers(), len(rejoins), wantLeavers, wantRejoiners)
		}
		for u, ls := range leaves {
			if len(ls) > 2 {
				t.Fatalf("%+v: user %d leaves %d times", cfg, u, len(ls))
			}
		}
	}
}

func TestPlanRepeatsSomeLeaves(t *testing.T) {
	p, err := NewPlan(Config{Seed: 7, Users: 1000, Signals: 1000, LeavePct: 50, RejoinPct: 25})
	if err != nil {
		t.Fatal(err)
	}
	n := make(map[uint64]int)
	for _, c := range p.Commands {
		if c.Op == topics.Leave {
			n[c.User]++
		}
	}
	twice := 0
	for _, k := range n {
		if k == 2 {
			twice++
		}
	}
	if lo, hi := len(n)/repeatOneIn/2, len(n)/repeatOneIn*2; twice < lo || twice > hi {
		t.Fatalf("%d of %d leavers leave twice, want about one in %d", twice, len(n), repeatOneIn)
	}
}

func TestConfigValidate(t *testing.T) {
	ok := Config{Users: 1, Signals: 1}
	for name, mut := range map[string]func(*Config){
		"no users":            func(c *Config) { c.Users = 0 },
		"negative signals":    func(c *Config) { c.Signals = -1 },
		"leave over 100":      func(c *Config) { c.LeavePct = 101 },
		"leave NaN":           func(c *Config) { c.LeavePct = math.NaN() },
		"rejoin above leave":  func(c *Config) { c.LeavePct, c.RejoinPct = 1, 2 },
		"negative rate":       func(c *Config) { c.Rate = -1 },
		"infinite rate":       func(c *Config) { c.Rate = math.Inf(1) },
		"negative value size": func(c *Config) { c.ValueSize = -1 },
	} {
		t.Run(name, func(t *testing.T) {
			c := ok
			mut(&c)
			if err := c.Validate(); err == nil || !strings.HasPrefix(err.Error(), "workload: ") {
				t.Fatalf("Validate() = %v, want a workload error", err)
			}
			if _, err := NewPlan(c); err == nil {
				t.Fatal("NewPlan accepted an invalid config")
			}
		})
	}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestSignalValues(t *testing.T) {
	for _, tc := range []struct {
		seq  uint64
		size int
		want string
	}{
		{0, 0, "sig-0-"},
		{17, 10, "sig-17-..."},
		{123456, 4, "sig-123456-"},
	} {
		got := AppendValue([]byte("x"), tc.seq, tc.size)
		if string(got) != "x"+tc.want {
			t.Errorf("AppendValue(%d, %d) = %q, want %q", tc.seq, tc.size, got[1:], tc.want)
		}
		if seq, err := ParseSignalID(got[1:]); err != nil || seq != tc.seq {
			t.Errorf("ParseSignalID(%q) = %d, %v", got[1:], seq, err)
		}
	}
	for _, bad := range []string{"", "sig-", "sig--", "sig-12", "sig-x-", "sgi-1-", "sig-99999999999999999999999-"} {
		if _, err := ParseSignalID([]byte(bad)); err == nil {
			t.Errorf("ParseSignalID(%q) accepted", bad)
		}
	}
}

// usersOf is the user of each signal of p, in order.
func usersOf(p *Plan) []uint64 {
	var users []uint64
	for _, u := range p.SignalUsers() {
		users = append(users, u)
	}
	return users
}

// TestSignalUsersRepeat: every call of SignalUsers yields the same users,
// and stopping early stops.
func TestSignalUsersRepeat(t *testing.T) {
	p, err := NewPlan(Config{Seed: 11, Users: 1000, Signals: 5000, LeavePct: 5, RejoinPct: 1})
	if err != nil {
		t.Fatal(err)
	}
	a, b := usersOf(p), usersOf(p)
	if len(a) != 5000 || !slices.Equal(a, b) {
		t.Fatalf("two calls gave %d and %d users, equal: %v", len(a), len(b), slices.Equal(a, b))
	}
	n := 0
	for range p.SignalUsers() {
		if n++; n == 10 {
			break
		}
	}
	if n != 10 {
		t.Fatalf("stopped after %d", n)
	}
}
