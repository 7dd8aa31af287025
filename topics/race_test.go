//go:build race

package topics

// raceEnabled: the race detector makes sync.Pool drop items, so pooled
// allocations show up in allocation counts.
const raceEnabled = true
