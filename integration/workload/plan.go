package workload

import (
	"errors"
	"fmt"
	"iter"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"

	"github.com/cohortgate/cohortgate/topics"
)

// Config describes a load. The zero value is not valid: Users must be at
// least 1.
type Config struct {
	// Seed makes the plan: the same Config gives the same Plan.
	Seed uint64
	// Users is the number of users, with ids 1..Users.
	Users int
	// Signals is the number of signals.
	Signals int
	// ValueSize is the size in bytes of each signal's value. A value is
	// never shorter than its id ("sig-<seq>-"), whatever ValueSize says.
	ValueSize int
	// LeavePct is the percentage of users who leave, 0..100.
	LeavePct float64
	// RejoinPct is the percentage of users who rejoin after leaving,
	// 0..LeavePct: they are chosen among the leavers.
	RejoinPct float64
	// Rate is how many signals Produce writes per second; 0 is as fast as
	// the client takes them.
	Rate float64
	// Partitions is the partition count of the commands and signals
	// topics. The hostile mix needs it (to misroute records and to put
	// users in one partition); the friendly load does not.
	Partitions int
	// Routing, when set, gives the partition count the hostile mix routes
	// its records by at the moment: the commands topic's (commands true)
	// or the inputs'. A run that grows the topics under the load sets it,
	// so that the mix routes as producers that learned of the growth do
	// (its misrouted records stay misrouted); nil: Partitions throughout.
	// It changes what is played, never the Plan.
	Routing func(commands bool) int32
	// Hostile is the hostile mix; the zero value is none.
	Hostile Hostile
}

// Validate reports the first field of c that is out of range.
func (c Config) Validate() error {
	switch {
	case c.Users < 1:
		return fmt.Errorf("workload: Users is %d, want at least 1", c.Users)
	case c.Users > math.MaxInt32:
		return fmt.Errorf("workload: Users is %d, want at most %d", c.Users, math.MaxInt32)
	case c.Signals < 0:
		return fmt.Errorf("workload: Signals is %d, want at least 0", c.Signals)
	case c.ValueSize < 0 || c.ValueSize > 1<<20:
		return fmt.Errorf("workload: ValueSize is %d, want 0..1048576", c.ValueSize)
	case !(c.LeavePct >= 0 && c.LeavePct <= 100):
		return fmt.Errorf("workload: LeavePct is %v, want 0..100", c.LeavePct)
	case !(c.RejoinPct >= 0 && c.RejoinPct <= c.LeavePct):
		return fmt.Errorf("workload: RejoinPct is %v, want 0..LeavePct (%v): rejoiners are chosen among the leavers", c.RejoinPct, c.LeavePct)
	case !(c.Rate >= 0) || math.IsInf(c.Rate, 0):
		return fmt.Errorf("workload: Rate is %v, want a finite number >= 0", c.Rate)
	case c.Partitions < 0:
		return fmt.Errorf("workload: Partitions is %d, want at least 0", c.Partitions)
	}
	return c.Hostile.validate(c.Partitions)
}

// Command is one planned leave or rejoin.
type Command struct {
	// Index is the command's position in Plan.Commands; its request_id
	// is the decimal Index.
	Index int
	// Before is the number of signals produced before the command: it
	// goes out just before signal Before, or after the last signal when
	// Before == Plan.Config.Signals.
	Before int
	Op     topics.Op
	User   uint64
}

// Plan is the deterministic sequence a Config stands for.
type Plan struct {
	Config Config
	// users is the random stream of the signals' users at its start:
	// SignalUsers draws them from a copy each time, as an hour's soak of
	// ~900M signals would hold 3.6 GB of them.
	users rand.PCG
	// Commands in the order they are produced: ascending Before, and in
	// plan order among equal Before (a user's leave before its rejoin).
	Commands []Command
	// Scenes of the hostile mix, in the order they are played.
	Scenes []Scene
}

// repeatOneIn is how rarely a leaver sends its leave twice.
const repeatOneIn = 8

// NewPlan makes the plan of cfg. See the package documentation for what
// it contains.
func NewPlan(cfg Config) (*Plan, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	src := rand.NewPCG(cfg.Seed, cfg.Seed^0x9e3779b97f4a7c15)
	rng := rand.New(src)
	p := &Plan{Config: cfg}

	leavers := int(math.Round(float64(cfg.Users) * cfg.LeavePct / 100))
	rejoiners := min(int(math.Round(float64(cfg.Users)*cfg.RejoinPct/100)), leavers)
	order := rng.Perm(cfg.Users)
	for i := range leavers {
		user := uint64(order[i]) + 1
		// Points are 0..Signals; a command at point b goes just before
		// signal b. Among commands at one point, the stable sort below
		// keeps the order they are appended in: leave, repeat, rejoin.
		leave := rng.IntN(cfg.Signals + 1)
		rejoin := -1
		if i < rejoiners {
			rejoin = leave
			if leave < cfg.Signals {
				rejoin = leave + 1 + rng.IntN(cfg.Signals-leave)
			}
		}
		p.Commands = append(p.Commands, Command{Before: leave, Op: topics.Leave, User: user})
		if rng.IntN(repeatOneIn) == 0 {
			last := cfg.Signals
			if rejoin >= 0 {
				last = rejoin
			}
			p.Commands = append(p.Commands, Command{Before: leave + rng.IntN(last-leave+1), Op: topics.Leave, User: user})
		}
		if rejoin >= 0 {
			p.Commands = append(p.Commands, Command{Before: rejoin, Op: topics.Rejoin, User: user})
		}
	}
	slices.SortStableFunc(p.Commands, func(a, b Command) int { return a.Before - b.Before })
	for i := range p.Commands {
		p.Commands[i].Index = i
	}
	p.users = *src // the users are drawn next, by SignalUsers
	// The hostile mix draws from a stream of its own: the friendly load of
	// a seed stays the same with or without it.
	p.Scenes = planScenes(cfg, rand.New(rand.NewPCG(cfg.Seed, cfg.Seed^0x6a09e667f3bcc909)))
	return p, nil
}

// SignalUsers yields each signal's seq and user, in order: the same
// sequence on every call.
func (p *Plan) SignalUsers() iter.Seq2[int, uint64] {
	return func(yield func(int, uint64) bool) {
		src := p.users
		rng := rand.New(&src)
		n := uint64(p.Config.Users)
		for seq := range p.Config.Signals {
			if !yield(seq, rng.Uint64N(n)+1) {
				return
			}
		}
	}
}

// Leavers returns the number of distinct users who leave in the plan.
func (p *Plan) Leavers() int {
	seen := make(map[uint64]bool)
	for _, c := range p.Commands {
		if c.Op == topics.Leave {
			seen[c.User] = true
		}
	}
	return len(seen)
}

// signalPrefix starts every signal value.
const signalPrefix = "sig-"

// AppendValue appends the value of signal seq to dst: "sig-<seq>-" padded
// with '.' to size bytes.
func AppendValue(dst []byte, seq uint64, size int) []byte {
	start := len(dst)
	dst = append(dst, signalPrefix...)
	dst = strconv.AppendUint(dst, seq, 10)
	dst = append(dst, '-')
	for len(dst)-start < size {
		dst = append(dst, '.')
	}
	return dst
}

// errNotSignal is returned by ParseSignalID for a value that no plan made.
var errNotSignal = errors.New("workload: not a signal value")

// ParseSignalID returns the seq of a value written by AppendValue.
func ParseSignalID(value []byte) (uint64, error) {
	if len(value) < len(signalPrefix)+2 || string(value[:len(signalPrefix)]) != signalPrefix {
		return 0, errNotSignal
	}
	rest := value[len(signalPrefix):]
	var seq uint64
	i := 0
	for ; i < len(rest) && rest[i] >= '0' && rest[i] <= '9'; i++ {
		if seq > (math.MaxUint64-9)/10 {
			return 0, errNotSignal
		}
		seq = seq*10 + uint64(rest[i]-'0')
	}
	if i == 0 || i == len(rest) || rest[i] != '-' {
		return 0, errNotSignal
	}
	return seq, nil
}
