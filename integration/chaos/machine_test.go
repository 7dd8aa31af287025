package main

import "testing"

func TestParseLoadAverage(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want float64
		ok   bool
	}{
		{"7.23 6.21 4.20 5/1234 5678\n", 7.23, true},
		{"0.00 0.01 0.05 1/99 1", 0, true},
		{"", 0, false},
		{"busy 1 2", 0, false},
	} {
		got, ok := parseLoadAverage(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("parseLoadAverage(%q) = %v, %v; want %v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestSpread(t *testing.T) {
	if got, want := spread([]float64{9, 1, 4, 7, 2}), "median 4.00 (min 1.00, max 9.00)"; got != want {
		t.Fatalf("spread = %q, want %q", got, want)
	}
}
