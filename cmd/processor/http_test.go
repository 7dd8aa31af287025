package main

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/cohortgate/cohortgate/pkg/fanout"
	"github.com/cohortgate/cohortgate/topics"
)

// stubView is a processor that is ready, knows no one, and owns parts.
type stubView struct{ parts []fanout.PartitionStatus }

func (stubView) Ready() (bool, string) { return true, "" }
func (stubView) Member(userID uint64) (topics.MemberRecord, error) {
	return topics.MemberRecord{}, nil
}
func (v stubView) Partitions() []fanout.PartitionStatus { return v.parts }

// TestPartitionsJSON: /v1/partitions shows each owned partition with every
// route's input, as the README documents it.
func TestPartitionsJSON(t *testing.T) {
	v := stubView{parts: []fanout.PartitionStatus{
		{Partition: 3, CaughtUp: true, Inputs: []fanout.InputStatus{{Topic: "engagement.signals", Next: 5120}, {Topic: "attribution.events", Next: -1}}},
		{Partition: 4, OpenTransaction: 1500 * time.Millisecond, Inputs: []fanout.InputStatus{{Topic: "engagement.signals", Next: 7}, {Topic: "attribution.events", Next: 9}}},
	}}
	rec := httptest.NewRecorder()
	newHandler(prometheus.NewRegistry(), v, false).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/v1/partitions", nil))
	var got map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatalf("GET /v1/partitions: %v in %s", err, rec.Body)
	}
	var want map[string]any
	_ = json.Unmarshal([]byte(`{
		"3": {"state": "forwarding", "open_transaction_seconds": 0,
		      "inputs": {"engagement.signals": {"next_offset": 5120}, "attribution.events": {"next_offset": -1}}},
		"4": {"state": "restoring", "open_transaction_seconds": 1.5,
		      "inputs": {"engagement.signals": {"next_offset": 7}, "attribution.events": {"next_offset": 9}}}}`), &want)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("GET /v1/partitions = %s\nwant %v", rec.Body, want)
	}
}

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
