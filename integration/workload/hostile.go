package workload

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Hostile configures the hostile mix: scenes played next to the friendly
// load, each on users of its own (ids above Config.Users), each one way in
// which real producers break the friendly load's assumptions. The zero
// value is no hostile mix. See the package documentation for the scenes.
type Hostile struct {
	// Scenes is how many scenes are played over the load; 0 is none.
	Scenes int
	// Shares weighs the kinds of scene; nil is DefaultShares. A kind
	// with a share plays about Scenes × share / (sum of shares) scenes,
	// at least one.
	Shares Shares
	// Grace is the processors' --grace: a late leave is stamped further
	// back than this. Default 2s, the processor's default.
	Grace time.Duration
	// MaxFutureSkew is the processors' --max-future-skew: a future
	// boundary is stamped an hour beyond it, a future signal five minutes.
	// Default 5s.
	MaxFutureSkew time.Duration
	// Hold is how long a held transaction stays open at most; each holds
	// for Hold/2..Hold. Default 2×Grace + 2s, at least 4s.
	Hold time.Duration
	// LargeBytes is the size of the largest poison records (a bad-key
	// signal; the oversize command is 3/4 of it, the valid large signal
	// LargeBytes-20000). Default 1040000: under Kafka's default
	// max.message.bytes (1048588), above franz-go's default batch limit
	// (1000012). Tests against brokers with smaller limits lower it.
	LargeBytes int
}

// Kind is a kind of hostile scene.
type Kind string

// The kinds of scene.
const (
	// KindMisroute: a leave and signals produced to the CRC32 partition
	// of their key, as librdkafka-based clients do.
	KindMisroute Kind = "misroute"
	// KindTxnHeld: a transactional producer holds a leave open for
	// seconds while other users of its partition leave and keep sending
	// signals; a processor that observes the last stable offset leaks.
	KindTxnHeld Kind = "txn-held"
	// KindTxnAbort: a leave in an aborted transaction, which must take no
	// effect.
	KindTxnAbort Kind = "txn-abort"
	// KindRedeliver: commands delivered again (the same record), and
	// leaves again with new request ids, which must not re-apply old ones.
	KindRedeliver Kind = "redeliver"
	// KindLateLeave: a leave stamped further back than the grace, and an
	// earlier boundary after a leave (the earliest wins).
	KindLateLeave Kind = "late-leave"
	// KindSameMilli: a leave and a rejoin of one user in one millisecond,
	// both without at_ns.
	KindSameMilli Kind = "same-ms"
	// KindFuture: a boundary an hour beyond the skew, and a signal five
	// minutes beyond it.
	KindFuture Kind = "future"
	// KindPoison: oversize, malformed, out-of-range and bad-key records
	// on both inputs.
	KindPoison Kind = "poison"
)

// Kinds returns every kind of scene, in a fixed order.
func Kinds() []Kind {
	return []Kind{KindMisroute, KindTxnHeld, KindTxnAbort, KindRedeliver, KindLateLeave, KindSameMilli, KindFuture, KindPoison}
}

// Shares weighs kinds of scene; a kind absent or at 0 is never played.
type Shares map[Kind]float64

// DefaultShares plays every kind equally.
func DefaultShares() Shares {
	s := make(Shares)
	for _, k := range Kinds() {
		s[k] = 1
	}
	return s
}

// ParseShares reads "kind=weight,kind=weight" (e.g. "txn-held=2,poison=1");
// kinds left out get 0. "" is DefaultShares.
func ParseShares(s string) (Shares, error) {
	if strings.TrimSpace(s) == "" {
		return DefaultShares(), nil
	}
	out := make(Shares)
	for _, part := range strings.Split(s, ",") {
		name, weight, ok := strings.Cut(strings.TrimSpace(part), "=")
		k := Kind(strings.TrimSpace(name))
		if !ok || !slices.Contains(Kinds(), k) {
			return nil, fmt.Errorf("workload: share %q: want kind=weight with a kind of %v", part, Kinds())
		}
		w, err := strconv.ParseFloat(strings.TrimSpace(weight), 64)
		if err != nil || !(w >= 0) || math.IsInf(w, 0) {
			return nil, fmt.Errorf("workload: share %q: the weight must be a number >= 0", part)
		}
		out[k] = w
	}
	return out, nil
}

// String renders s as ParseShares reads it.
func (s Shares) String() string {
	var parts []string
	for _, k := range Kinds() {
		if w := s[k]; w > 0 {
			parts = append(parts, string(k)+"="+strconv.FormatFloat(w, 'g', -1, 64))
		}
	}
	return strings.Join(parts, ",")
}

// withDefaults returns h with its defaults filled in.
func (h Hostile) withDefaults() Hostile {
	if h.Shares == nil {
		h.Shares = DefaultShares()
	}
	if h.Grace <= 0 {
		h.Grace = 2 * time.Second
	}
	if h.MaxFutureSkew <= 0 {
		h.MaxFutureSkew = 5 * time.Second
	}
	if h.Hold <= 0 {
		h.Hold = max(4*time.Second, 2*h.Grace+2*time.Second)
	}
	if h.LargeBytes <= 0 {
		h.LargeBytes = 1_040_000
	}
	return h
}

// validate reports the first field of h that is out of range.
func (h Hostile) validate(partitions int) error {
	if h.Scenes == 0 {
		return nil
	}
	h = h.withDefaults()
	sum := 0.0
	for _, w := range h.Shares {
		sum += w
	}
	switch {
	case h.Scenes < 0:
		return fmt.Errorf("workload: Hostile.Scenes is %d, want at least 0", h.Scenes)
	case partitions < 1:
		return fmt.Errorf("workload: the hostile mix needs Partitions (the commands and signals topics' partition count), got %d", partitions)
	case sum <= 0:
		return fmt.Errorf("workload: Hostile.Shares %v gives no kind a weight", h.Shares)
	case h.Hold < 2*h.Grace+500*time.Millisecond:
		return fmt.Errorf("workload: Hostile.Hold %v must be at least twice the grace %v plus 0.5s, or a held transaction leaks nothing", h.Hold, h.Grace)
	case h.LargeBytes < 1024 || h.LargeBytes > 1_048_000:
		return fmt.Errorf("workload: Hostile.LargeBytes is %d, want 1024..1048000", h.LargeBytes)
	}
	return nil
}

// Scene is one hostile scene of a plan. The plan fixes everything but the
// wall clock: which users, when in the load, how long a transaction holds,
// how far back a late leave is stamped, the bytes of the large records.
type Scene struct {
	Index int
	Kind  Kind
	// At is when in the load the scene starts: before signal
	// At × Config.Signals of the friendly load.
	At float64
	// Users are the scene's own users; no other scene nor the friendly
	// load uses them.
	Users []uint64
	// Hold is how long a txn-held scene keeps its transaction open.
	Hold time.Duration
	// Late is how far before its production a late-leave scene stamps
	// its leave: Grace + 0.5s..3s.
	Late time.Duration
	// Seed makes the scene's random bytes.
	Seed uint64
}

// planScenes makes the hostile scenes of cfg: kinds in proportion to
// their shares, in a seeded order, spread evenly over the load.
func planScenes(cfg Config, rng *rand.Rand) []Scene {
	h := cfg.Hostile.withDefaults()
	if cfg.Hostile.Scenes == 0 {
		return nil
	}
	var kinds []Kind
	sum := 0.0
	for _, k := range Kinds() {
		sum += h.Shares[k]
	}
	for _, k := range Kinds() {
		if w := h.Shares[k]; w > 0 {
			for range max(1, int(math.Round(float64(cfg.Hostile.Scenes)*w/sum))) {
				kinds = append(kinds, k)
			}
		}
	}
	rng.Shuffle(len(kinds), func(i, j int) { kinds[i], kinds[j] = kinds[j], kinds[i] })
	users := &userPool{next: uint64(cfg.Users) + 1, partitions: int32(cfg.Partitions)}
	scenes := make([]Scene, len(kinds))
	for i, k := range kinds {
		s := Scene{Index: i, Kind: k, At: float64(i) / float64(len(kinds)), Seed: rng.Uint64()}
		switch k {
		case KindMisroute:
			s.Users = []uint64{users.misroutable()}
		case KindTxnHeld:
			x := users.any()
			p := murmurPartition(userKey(x), users.partitions)
			s.Users = []uint64{x, users.in(p), users.in(p)}
			s.Hold = h.Hold/2 + time.Duration(rng.Int64N(int64(h.Hold/2)+1))
		case KindTxnAbort, KindSameMilli, KindFuture:
			s.Users = []uint64{users.any()}
		case KindRedeliver, KindLateLeave, KindPoison:
			s.Users = []uint64{users.any(), users.any()}
		}
		if k == KindLateLeave {
			s.Late = h.Grace + 500*time.Millisecond + time.Duration(rng.Int64N(int64(2500*time.Millisecond)+1))
		}
		scenes[i] = s
	}
	return scenes
}

// userPool hands out the hostile users: fresh ids, in order, skipping the
// ids that do not fit a request (they stay unused).
type userPool struct {
	next       uint64
	partitions int32
}

// scanLimit bounds the ids a pool scans for a user that fits.
const scanLimit = 4096

func (u *userPool) any() uint64 {
	id := u.next
	u.next++
	return id
}

// in returns a user whose key's murmur2 partition is p.
func (u *userPool) in(p int32) uint64 {
	for range scanLimit {
		if id := u.any(); murmurPartition(userKey(id), u.partitions) == p {
			return id
		}
	}
	return u.any() // cannot happen with uniform hashing; the scene then spans partitions
}

// misroutable returns a user whose key's CRC32 partition differs from its
// murmur2 partition, when there is one (never with one partition).
func (u *userPool) misroutable() uint64 {
	if u.partitions > 1 {
		for range scanLimit {
			if id := u.any(); crcPartition(userKey(id), u.partitions) != murmurPartition(userKey(id), u.partitions) {
				return id
			}
		}
	}
	return u.any()
}
