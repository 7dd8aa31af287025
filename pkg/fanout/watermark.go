package fanout

import (
	"sort"
	"sync"
)

// observation is the end of a commands partition as the broker reported it
// to a request sent at wall-clock time sentNs. Because the broker answers
// after the request was sent, every command acknowledged before sentNs lies
// below end: the observation proves "commands acknowledged by sentNs are in
// [0, end)".
type observation struct {
	sentNs int64 // wall clock, ns since the Unix epoch, when the request left
	end    int64 // last stable offset (read_committed end), exclusive
}

// watermarks holds the recent end-offset observations of one commands
// partition, oldest first. It answers the alignment question: up to which
// wall-clock instant is a given applied position known to be complete?
//
// Observations are appended by the tracker goroutine and read by the main
// loop; mu guards them. The ring is bounded: once full, the oldest
// observation is dropped. Dropping is safe because a deadline older than
// every retained observation is satisfied by any of them (see through).
type watermarks struct {
	mu struct {
		sync.Mutex
		obs []observation // ascending sentNs; len <= limit
	}
	limit int
}

func newWatermarks(limit int) *watermarks {
	if limit < 2 {
		limit = 2
	}
	w := &watermarks{limit: limit}
	w.mu.obs = make([]observation, 0, limit)
	return w
}

// observe records an observation. Out-of-order sends (sentNs not after the
// newest) are ignored so that sentNs stays ascending. An end below the newest
// recorded end is not stored: the log went backwards (the topic was deleted
// and recreated), and observe reports it with regressed and the previous end
// so the caller can halt instead of trusting either.
func (w *watermarks) observe(o observation) (prevEnd int64, regressed bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := len(w.mu.obs)
	if n > 0 {
		last := w.mu.obs[n-1]
		if o.end < last.end {
			return last.end, true
		}
		if o.sentNs <= last.sentNs {
			return last.end, false
		}
	}
	if n == w.limit {
		copy(w.mu.obs, w.mu.obs[1:])
		w.mu.obs = w.mu.obs[:n-1]
	}
	w.mu.obs = append(w.mu.obs, o)
	return o.end, false
}

// through returns the latest wall-clock instant T such that every command
// acknowledged before T has been applied, given that commands below applied
// have been applied, considering only observations sent at or after notBefore.
// ok is false when no such observation exists yet.
//
// An observation (sentNs, end) with end <= applied proves completeness up to
// sentNs. observe keeps ends ascending with sentNs, so the answer is the
// newest observation whose end is at most applied.
func (w *watermarks) through(applied, notBefore int64) (ns int64, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	obs := w.mu.obs
	lo := sort.Search(len(obs), func(i int) bool { return obs[i].sentNs >= notBefore })
	obs = obs[lo:]
	// First index whose end exceeds applied; the one before it is the answer.
	i := sort.Search(len(obs), func(i int) bool { return obs[i].end > applied })
	if i == 0 {
		return 0, false
	}
	return obs[i-1].sentNs, true
}

// newest returns the most recent observation.
func (w *watermarks) newest() (observation, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(w.mu.obs) == 0 {
		return observation{}, false
	}
	return w.mu.obs[len(w.mu.obs)-1], true
}
