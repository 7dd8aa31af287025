package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

func TestReadOffset(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, content string // content "-" : no file
		want          time.Duration
		ok            bool
	}{
		{"missing", "-", 0, true},
		{"empty", "", 0, true},
		{"forward", "60s\n", time.Minute, true},
		{"backward", "-3.5s", -3500 * time.Millisecond, true},
		{"garbage", "soon", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, tc.name)
			if tc.content != "-" {
				if err := os.WriteFile(path, []byte(tc.content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if d, ok := readOffset(path); d != tc.want || ok != tc.ok {
				t.Fatalf("readOffset(%q) = %v, %v; want %v, %v", tc.content, d, ok, tc.want, tc.ok)
			}
		})
	}
}

// TestOffsetClockSteps: the clock follows the file within the refresh,
// and a garbled file keeps the offset it had.
func TestOffsetClockSteps(t *testing.T) {
	path := filepath.Join(t.TempDir(), "offset")
	c := &offsetClock{path: path}
	near := func(want time.Duration) error {
		got := time.Until(c.now())
		if d := got - want; d < -time.Second || d > time.Second {
			return &offsetError{got, want}
		}
		return nil
	}
	if err := near(0); err != nil {
		t.Fatal(err)
	}
	for _, step := range []struct {
		content string
		want    time.Duration
	}{{"1h", time.Hour}, {"bad", time.Hour}, {"-1h", -time.Hour}, {"", 0}} {
		if err := os.WriteFile(path, []byte(step.content), 0o644); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for {
			err := near(step.want)
			if err == nil {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("after writing %q: %v", step.content, err)
			}
			time.Sleep(offsetClockRefresh)
		}
	}
}

type offsetError struct{ got, want time.Duration }

func (e *offsetError) Error() string {
	return "clock is " + e.got.String() + " from the system's, want about " + e.want.String()
}
