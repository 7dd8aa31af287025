package main

import (
	"github.com/cohortgate/cohortgate/pkg/fanout"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cohortgate/cohortgate/topics"
)

// stubView is a processor that is ready and knows no one.
type stubView struct{}

func (stubView) Ready() (bool, string) { return true, "" }
func (stubView) Member(userID uint64) (topics.MemberRecord, error) {
	return topics.MemberRecord{}, nil
}
func (stubView) Partitions() []fanout.PartitionStatus { return nil }

// TestPprofOnlyWithFlag: the profiler is served only when asked for.
func TestPprofOnlyWithFlag(t *testing.T) {
	for _, tc := range []struct {
		name  string
		pprof bool
		want  int
	}{
		{"off by default", false, http.StatusNotFound},
		{"on with --pprof", true, http.StatusOK},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := newHandler(prometheus.NewRegistry(), stubView{}, tc.pprof)
			for _, path := range []string{"/debug/pprof/", "/debug/pprof/cmdline"} {
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
				if rec.Code != tc.want {
					t.Errorf("GET %s: %d, want %d", path, rec.Code, tc.want)
				}
			}
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/healthz", nil))
			if rec.Code != http.StatusOK {
				t.Errorf("GET /healthz: %d", rec.Code)
			}
		})
	}
}

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:8080": true, "localhost:8080": true, "[::1]:8080": true,
		":8080": false, "0.0.0.0:8080": false, "10.0.0.5:8080": false, "nonsense": false,
	} {
		if got := isLoopback(addr); got != want {
			t.Errorf("isLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}
