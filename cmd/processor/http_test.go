package main

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"strings"
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
// route's input, and a restore's progress while one runs, as
// docs/operations.md documents it.
func TestPartitionsJSON(t *testing.T) {
	v := stubView{parts: []fanout.PartitionStatus{
		{Partition: 3, CaughtUp: true, Inputs: []fanout.InputStatus{{Topic: "engagement.signals", Next: 5120}, {Topic: "attribution.events", Next: -1}}},
		{Partition: 4, OpenTransaction: 1500 * time.Millisecond, Inputs: []fanout.InputStatus{{Topic: "engagement.signals", Next: 7}, {Topic: "attribution.events", Next: 9}}},
		{Partition: 5, Inputs: []fanout.InputStatus{{Topic: "engagement.signals", Next: -1}, {Topic: "attribution.events", Next: -1}},
			Restore: &fanout.RestoreProgressInfo{Partition: 5, Phase: "reading the changelog", Records: 250_000, RecordsTotal: 1_000_000,
				Bytes: 25 << 20, BytesTotal: 100 << 20, Elapsed: 2500 * time.Millisecond, RecordsPerSecond: 100_000, BytesPerSecond: 10 << 20}},
	}}
	rec := httptest.NewRecorder()
	req := httptest.NewRequest(http.MethodGet, "/v1/partitions", nil)
	req.Header.Set("Authorization", "Bearer "+testToken)
	newAPIHandler(v, testBearer(t)).ServeHTTP(rec, req)
	var got map[string]any
	if err := json.Unmarshal(rec.Body.Bytes(), &got); err != nil {
		t.Fatalf("GET /v1/partitions: %v in %s", err, rec.Body)
	}
	var want map[string]any
	_ = json.Unmarshal([]byte(`{
		"3": {"state": "forwarding", "open_transaction_seconds": 0,
		      "inputs": {"engagement.signals": {"next_offset": 5120}, "attribution.events": {"next_offset": -1}}},
		"4": {"state": "restoring", "open_transaction_seconds": 1.5,
		      "inputs": {"engagement.signals": {"next_offset": 7}, "attribution.events": {"next_offset": 9}}},
		"5": {"state": "restoring", "open_transaction_seconds": 0,
		      "inputs": {"engagement.signals": {"next_offset": -1}, "attribution.events": {"next_offset": -1}},
		      "restore": {"phase": "reading the changelog", "records": 250000, "records_total": 1000000,
		                  "bytes": 26214400, "bytes_total": 104857600, "elapsed_seconds": 2.5,
		                  "records_per_second": 100000, "bytes_per_second": 10485760}}}`), &want)
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
			h := newOpsHandler(prometheus.NewRegistry(), stubView{}, tc.pprof)
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

const testToken = "s3cret-token"

// testBearer guards with testToken, logging into the test's log.
func testBearer(t *testing.T) *bearer {
	t.Helper()
	path := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(path, []byte(testToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return &bearer{tokenFile: path, log: slog.New(slog.NewTextHandler(t.Output(), nil)), limit: newLogLimiter(time.Second)}
}

// TestAPIGuarded: the metrics listener does not serve the membership API,
// and the API answers 401 without a token, 403 with a wrong one and the
// record with the right one; an unknown path is refused before it is 404.
func TestAPIGuarded(t *testing.T) {
	ops := newOpsHandler(prometheus.NewRegistry(), stubView{}, true)
	for _, path := range []string{"/v1/members/42", "/v1/partitions"} {
		rec := httptest.NewRecorder()
		req := httptest.NewRequest(http.MethodGet, path, nil)
		req.Header.Set("Authorization", "Bearer "+testToken)
		ops.ServeHTTP(rec, req)
		if rec.Code != http.StatusNotFound {
			t.Errorf("metrics listener: GET %s: %d, want 404 (not served there)", path, rec.Code)
		}
	}
	api := newAPIHandler(stubView{}, testBearer(t))
	for _, tc := range []struct {
		name, path, auth string
		want             int
	}{
		{"no credentials", "/v1/members/42", "", http.StatusUnauthorized},
		{"not bearer", "/v1/members/42", "Basic dTpw", http.StatusUnauthorized},
		{"wrong token", "/v1/members/42", "Bearer guess", http.StatusForbidden},
		{"token prefix", "/v1/partitions", "Bearer " + testToken[:4], http.StatusForbidden},
		{"right token", "/v1/members/42", "Bearer " + testToken, http.StatusOK},
		{"partitions", "/v1/partitions", "Bearer " + testToken, http.StatusOK},
		{"unknown path, no credentials", "/v1/other", "", http.StatusUnauthorized},
		{"metrics not on the API", "/metrics", "Bearer " + testToken, http.StatusNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			req := httptest.NewRequest(http.MethodGet, tc.path, nil)
			if tc.auth != "" {
				req.Header.Set("Authorization", tc.auth)
			}
			api.ServeHTTP(rec, req)
			if rec.Code != tc.want {
				t.Errorf("GET %s with %q: %d %s, want %d", tc.path, tc.auth, rec.Code, rec.Body, tc.want)
			}
			if tc.want == http.StatusUnauthorized && !strings.HasPrefix(rec.Header().Get("WWW-Authenticate"), "Bearer") {
				t.Errorf("401 without WWW-Authenticate: Bearer")
			}
		})
	}
}

// TestAuditLogLimited: who asked is logged, at most once a second per
// client and outcome, with the count of what was left out.
func TestAuditLogLimited(t *testing.T) {
	var logs bytes.Buffer
	b := testBearer(t)
	b.log = slog.New(slog.NewTextHandler(&logs, nil))
	now := time.Unix(1000, 0)
	b.limit.now = func() time.Time { return now }
	api := newAPIHandler(stubView{}, b)
	ask := func(auth string) {
		req := httptest.NewRequest(http.MethodGet, "/v1/members/7", nil)
		req.RemoteAddr = "10.1.2.3:5555"
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		api.ServeHTTP(httptest.NewRecorder(), req)
	}
	for range 100 {
		ask("Bearer nope")
	}
	ask("Bearer " + testToken)
	now = now.Add(time.Second)
	ask("Bearer nope")
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	if len(lines) != 3 {
		t.Fatalf("%d lines for 102 requests over a second, want 3:\n%s", len(lines), logs.String())
	}
	for i, want := range []string{"outcome=forbidden", "outcome=granted", "suppressed_since_last=99"} {
		if !strings.Contains(lines[i], want) || !strings.Contains(lines[i], "client=10.1.2.3") || !strings.Contains(lines[i], `route="GET /v1/members/{user_id}"`) {
			t.Errorf("line %d does not say %s, the client and the route: %s", i, want, lines[i])
		}
	}
	if strings.Contains(logs.String(), testToken) || strings.Contains(logs.String(), "/v1/members/7") {
		t.Errorf("the audit log shows the token or the user asked for:\n%s", logs.String())
	}
}

// TestEnsureToken: without --api-token-file the processor creates a
// token readable by its owner only, and keeps it across starts; a given
// file must hold a token.
func TestEnsureToken(t *testing.T) {
	dir := t.TempDir()
	p, err := ensureToken("", dir)
	if err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(p)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("token file %s: %v, %v; want mode 0600", p, st, err)
	}
	first, _ := readToken(p)
	if len(first) < 32 {
		t.Errorf("token %q: too short", first)
	}
	if p2, _ := ensureToken("", dir); p2 != p {
		t.Errorf("second start uses %s, want %s", p2, p)
	}
	if again, _ := readToken(p); again != first {
		t.Error("the token changed across starts")
	}
	empty := filepath.Join(dir, "empty")
	_ = os.WriteFile(empty, []byte("\n"), 0o600)
	if _, err := ensureToken(empty, dir); err == nil || !strings.Contains(err.Error(), "--api-token-file") {
		t.Errorf("an empty token file: %v", err)
	}
}

// elsewhereView is a processor that owns none of the users it is asked
// about: caught is false for a partition it still catches up with.
type elsewhereView struct {
	stubView
	catchingUp bool
}

func (v elsewhereView) Member(userID uint64) (topics.MemberRecord, error) {
	return topics.MemberRecord{}, &fanout.NotOwnerError{User: userID, Partition: 2, CatchingUp: v.catchingUp}
}

// TestMembersOnlyFromTheOwner: an instance that does not own a user's
// partition says so (421, naming the partition) instead of answering from
// its store, and one still catching up asks to be asked again (503 with
// Retry-After).
func TestMembersOnlyFromTheOwner(t *testing.T) {
	for _, tc := range []struct {
		name       string
		v          view
		code       int
		retryAfter string
		says       string
	}{
		{"owner", stubView{}, http.StatusOK, "", `"status"`},
		{"not the owner", elsewhereView{}, http.StatusMisdirectedRequest, "", "commands partition 2, which this instance does not own"},
		{"catching up", elsewhereView{catchingUp: true}, http.StatusServiceUnavailable, "1", "still catching up with commands partition 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			req := httptest.NewRequest(http.MethodGet, "/v1/members/42", nil)
			req.Header.Set("Authorization", "Bearer "+testToken)
			newAPIHandler(tc.v, testBearer(t)).ServeHTTP(rec, req)
			if rec.Code != tc.code || rec.Header().Get("Retry-After") != tc.retryAfter || !strings.Contains(rec.Body.String(), tc.says) {
				t.Errorf("GET /v1/members/42 = %d (Retry-After %q) %s\nwant %d (Retry-After %q) saying %q",
					rec.Code, rec.Header().Get("Retry-After"), rec.Body, tc.code, tc.retryAfter, tc.says)
			}
		})
	}
}
