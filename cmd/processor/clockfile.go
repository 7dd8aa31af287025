package main

import (
	"os"
	"strings"
	"sync"
	"time"
)

// offsetClock is the wall clock of a processor whose clock a chaos run
// steps (--unsafe-clock-offset-file): the system's wall clock plus the
// duration the file holds ("60s", "-3s"; missing or empty: 0), read again
// at most every offsetClockRefresh. The kernel's clock cannot be stepped
// for one process, and the processor's monotonic clock is left alone, as
// a real step leaves it alone.
type offsetClock struct {
	path string

	mu     sync.Mutex
	offset time.Duration
	readAt time.Time // monotonic
}

// offsetClockRefresh is how stale the offset may be: a step lasts at
// least about this long.
const offsetClockRefresh = 20 * time.Millisecond

// now returns the stepped wall clock.
func (c *offsetClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.readAt.IsZero() || time.Since(c.readAt) >= offsetClockRefresh {
		c.readAt = time.Now()
		if d, ok := readOffset(c.path); ok {
			c.offset = d
		}
	}
	// Round(0) strips the monotonic reading: this is a wall-clock
	// instant, and comparing two of them must see the step.
	return time.Now().Round(0).Add(c.offset)
}

// readOffset reads the duration in path: 0 when it is missing or empty,
// ok false when it holds something else (the previous offset stands: a
// writer replaces the file by a rename, so a torn read means a bug).
func readOffset(path string) (time.Duration, bool) {
	b, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return 0, true
	}
	if err != nil {
		return 0, false
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return 0, true
	}
	d, err := time.ParseDuration(s)
	return d, err == nil
}
