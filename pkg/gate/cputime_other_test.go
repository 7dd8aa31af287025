//go:build !unix

package gate

import "time"

// cpuTime is 0 where getrusage is not: load-cpu-ms reads 0.
func cpuTime() time.Duration { return 0 }
