package workload

import (
	"math"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

// hostileConfig is a small load with a hostile mix of every kind.
func hostileConfig(seed uint64) Config {
	return Config{Seed: seed, Users: 100, Signals: 1000, LeavePct: 5, RejoinPct: 1, Partitions: 6,
		Hostile: Hostile{Scenes: 16, Grace: 200 * time.Millisecond}}
}

func TestHostilePlanIsDeterministic(t *testing.T) {
	a, err := NewPlan(hostileConfig(5))
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewPlan(hostileConfig(5))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Fatal("two plans of one config differ")
	}
	c, err := NewPlan(hostileConfig(6))
	if err != nil {
		t.Fatal(err)
	}
	if reflect.DeepEqual(a.Scenes, c.Scenes) {
		t.Fatal("seeds 5 and 6 give the same scenes")
	}
	friendly := hostileConfig(5)
	friendly.Hostile = Hostile{}
	f, err := NewPlan(friendly)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Scenes) != 0 || !reflect.DeepEqual(usersOf(f), usersOf(a)) || !reflect.DeepEqual(f.Commands, a.Commands) {
		t.Fatal("the hostile mix changed the friendly load of the seed")
	}
}

// TestHostilePlanShape checks what the scenes promise: kinds in
// proportion to their shares, spread over the load, users of their own
// (none shared, none of the friendly load's), misroutable users for
// misroute scenes, one partition for a held transaction's users, holds and
// late boundaries in their ranges.
func TestHostilePlanShape(t *testing.T) {
	cfg := hostileConfig(9)
	cfg.Hostile.Scenes = 40
	cfg.Hostile.Shares = Shares{KindMisroute: 1, KindTxnHeld: 1, KindLateLeave: 2}
	p, err := NewPlan(cfg)
	if err != nil {
		t.Fatal(err)
	}
	h := cfg.Hostile.withDefaults()
	kinds := make(map[Kind]int)
	seen := make(map[uint64]bool)
	for i, s := range p.Scenes {
		kinds[s.Kind]++
		if s.Index != i || s.At != float64(i)/float64(len(p.Scenes)) {
			t.Fatalf("scene %d: index %d at %v", i, s.Index, s.At)
		}
		for _, u := range s.Users {
			if u <= uint64(cfg.Users) || seen[u] {
				t.Fatalf("scene %d: user %d is the friendly load's or another scene's", i, u)
			}
			seen[u] = true
		}
		switch s.Kind {
		case KindMisroute:
			k := userKey(s.Users[0])
			if crcPartition(k, 6) == murmurPartition(k, 6) {
				t.Fatalf("scene %d: user %d is not misrouted by CRC32", i, s.Users[0])
			}
		case KindTxnHeld:
			p0 := murmurPartition(userKey(s.Users[0]), 6)
			for _, u := range s.Users[1:] {
				if murmurPartition(userKey(u), 6) != p0 {
					t.Fatalf("scene %d: users %v are not in one partition", i, s.Users)
				}
			}
			if s.Hold < h.Hold/2 || s.Hold > h.Hold {
				t.Fatalf("scene %d: hold %v outside %v..%v", i, s.Hold, h.Hold/2, h.Hold)
			}
		case KindLateLeave:
			if s.Late < h.Grace+500*time.Millisecond || s.Late > h.Grace+3*time.Second {
				t.Fatalf("scene %d: late by %v", i, s.Late)
			}
		}
	}
	if want := map[Kind]int{KindMisroute: 10, KindTxnHeld: 10, KindLateLeave: 20}; !reflect.DeepEqual(kinds, want) {
		t.Fatalf("kinds %v, want %v", kinds, want)
	}
}

func TestParseShares(t *testing.T) {
	s, err := ParseShares("misroute=2, poison=0.5,txn-held=0")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(s, Shares{KindMisroute: 2, KindPoison: 0.5, KindTxnHeld: 0}) || s.String() != "misroute=2,poison=0.5" {
		t.Fatalf("ParseShares = %v (%s)", s, s)
	}
	if d, err := ParseShares(" "); err != nil || !reflect.DeepEqual(d, DefaultShares()) || len(d) != len(Kinds()) {
		t.Fatalf("ParseShares(\"\") = %v, %v; want every kind", d, err)
	}
	for _, bad := range []string{"misroute", "nosuch=1", "poison=-1", "poison=x", "poison=NaN", "poison=Inf"} {
		if _, err := ParseShares(bad); err == nil || !strings.HasPrefix(err.Error(), "workload: ") {
			t.Errorf("ParseShares(%q) = %v, want an error", bad, err)
		}
	}
}

func TestHostileValidate(t *testing.T) {
	for name, mut := range map[string]func(*Config){
		"no partitions":             func(c *Config) { c.Partitions = 0 },
		"negative scenes":           func(c *Config) { c.Hostile.Scenes = -1 },
		"no share":                  func(c *Config) { c.Hostile.Shares = Shares{KindPoison: 0} },
		"a hold that leaks nothing": func(c *Config) { c.Hostile.Hold = 2*c.Hostile.Grace + 400*time.Millisecond },
		"huge records":              func(c *Config) { c.Hostile.LargeBytes = 2 << 20 },
	} {
		t.Run(name, func(t *testing.T) {
			c := hostileConfig(1)
			mut(&c)
			if err := c.Validate(); err == nil || !strings.HasPrefix(err.Error(), "workload: ") {
				t.Fatalf("Validate() = %v, want a workload error", err)
			}
		})
	}
	if err := hostileConfig(1).Validate(); err != nil {
		t.Fatal(err)
	}
	if h := (Hostile{Grace: 3 * time.Second}).withDefaults(); h.Hold != 8*time.Second || h.LargeBytes != 1_040_000 ||
		h.MaxFutureSkew != 5*time.Second || !slices.Equal(Kinds(), kindsOf(h.Shares)) || math.IsNaN(h.Shares[KindPoison]) {
		t.Fatalf("defaults %+v", h)
	}
}

func kindsOf(s Shares) []Kind {
	var out []Kind
	for _, k := range Kinds() {
		if s[k] > 0 {
			out = append(out, k)
		}
	}
	return out
}
