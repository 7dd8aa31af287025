package fanout

import (
	"strings"
	"testing"
	"time"
)

// TestConfigGrace pins a trap a user met: the doc said "Default 2s"
// while a zero Grace meant none, so a library user got no grace at all.
func TestConfigGrace(t *testing.T) {
	for _, tc := range []struct {
		name    string
		grace   time.Duration
		want    time.Duration // in force after EnsureDefaults
		invalid bool
	}{
		{"zero is the default", 0, DefaultGrace, false},
		{"NoGrace is none", NoGrace, 0, false},
		{"set", 50 * time.Millisecond, 50 * time.Millisecond, false},
		{"negative", -2 * time.Second, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := Config{Brokers: []string{"127.0.0.1:9092"}, Grace: tc.grace}
			c.EnsureDefaults()
			err := c.Validate()
			if tc.invalid {
				if err == nil || !strings.Contains(err.Error(), "Grace") {
					t.Fatalf("Validate = %v, want a Grace error", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := c.grace(); got != tc.want {
				t.Fatalf("grace in force = %v, want %v", got, tc.want)
			}
		})
	}
}
