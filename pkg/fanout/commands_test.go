package fanout

import (
	"math"
	"testing"
	"time"

	"github.com/cohortgate/cohortgate/topics"
)

// TestBoundary pins rule C4: a command's boundary, and the two reasons it
// can be refused for. Each case reads only the record, so a replay decides
// the same.
func TestBoundary(t *testing.T) {
	const skew = 5 * time.Second
	rec := time.UnixMilli(1764633600000)
	recNs := uint64(rec.UnixNano())
	for _, tc := range []struct {
		name   string
		cmd    topics.Command
		ts     time.Time
		want   uint64
		reason topics.Reason
	}{
		{"record timestamp stands in", topics.Command{}, rec, recNs, ""},
		{"at_ns", topics.Command{AtNs: recNs - 1e9, HasAt: true}, rec, recNs - 1e9, ""},
		{"at_ns in the past", topics.Command{AtNs: 0, HasAt: true}, rec, 0, ""},
		{"at_ns at the skew", topics.Command{AtNs: recNs + uint64(skew), HasAt: true}, rec, recNs + uint64(skew), ""},
		{"at_ns beyond the skew", topics.Command{AtNs: recNs + uint64(skew) + 1, HasAt: true}, rec, 0, topics.ReasonCommandFutureSkew},
		{"the OpenEnd sentinel", topics.Command{AtNs: math.MaxUint64, HasAt: true}, rec, 0, topics.ReasonCommandAtOutOfRange},
		{"above 2^63-1", topics.Command{AtNs: 1 << 63, HasAt: true}, rec, 0, topics.ReasonCommandAtOutOfRange},
		{"negative record timestamp, no at_ns", topics.Command{}, time.UnixMilli(-1), 0, topics.ReasonCommandAtOutOfRange},
		{"negative record timestamp, at_ns", topics.Command{AtNs: 5, HasAt: true}, time.UnixMilli(-1), 0, topics.ReasonCommandFutureSkew},
		{"record timestamp beyond 2^63-1 ns, no at_ns", topics.Command{}, time.UnixMilli(math.MaxInt64 / 1000), 0, topics.ReasonCommandAtOutOfRange},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, reason, err := boundary(tc.cmd, tc.ts, skew)
			if reason != tc.reason || (reason == "") != (err == nil) || (reason == "" && got != tc.want) {
				t.Fatalf("boundary = %d, %q, %v; want %d, %q", got, reason, err, tc.want, tc.reason)
			}
		})
	}
}
