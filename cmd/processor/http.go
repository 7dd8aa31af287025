package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/pprof"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/cohortgate/cohortgate/pkg/fanout"
	"github.com/cohortgate/cohortgate/topics"
)

// view is what the HTTP endpoints need of the processor.
type view interface {
	Ready() (ok bool, why string)
	Member(userID uint64) (topics.MemberRecord, error)
	Partitions() []fanout.PartitionStatus
}

// newOpsHandler routes the operational endpoints, for Prometheus and the
// orchestrator's probes (--http-addr):
//
//	GET /metrics                 Prometheus text format
//	GET /healthz                 200 while the process serves
//	GET /readyz                  200 once state is restored, the group has assigned this instance its partitions and each caught up, else 503 and why
//	/debug/pprof/...             Go's profiler, only when withPprof is set
//
// It serves no personal data: the membership API is on its own listener
// (newAPIHandler), so whoever may scrape metrics may not ask who left.
func newOpsHandler(reg prometheus.Gatherer, v view, withPprof bool) http.Handler {
	mux := http.NewServeMux()
	if withPprof {
		// The handlers net/http/pprof registers on the default mux, on ours.
		mux.HandleFunc("GET /debug/pprof/", pprof.Index)
		mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("POST /debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	}
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		ok, why := v.Ready()
		if !ok {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		fmt.Fprintln(w, why)
	})
	return mux
}

// newAPIHandler routes the membership API (--api-addr), every route
// behind auth:
//
//	GET /v1/members/{user_id}    the user's record, as the changelog carries it; only from the owner of the user's partition (else 421, or 503 while it catches up)
//	GET /v1/partitions           owned partitions: restoring or forwarding, how far a restore from the changelog is, how long an open transaction holds its commands, and each input's next offset
func newAPIHandler(v view, auth *bearer) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/members/{user_id}", func(w http.ResponseWriter, r *http.Request) {
		id, err := topics.ParseUserID([]byte(r.PathValue("user_id")))
		if err != nil {
			httpError(w, http.StatusBadRequest, fmt.Errorf("user_id: %w", err))
			return
		}
		m, err := v.Member(id)
		var notOwner *fanout.NotOwnerError
		switch {
		case errors.As(err, &notOwner) && notOwner.CatchingUp:
			w.Header().Set("Retry-After", "1")
			httpError(w, http.StatusServiceUnavailable, err)
			return
		case errors.As(err, &notOwner):
			// Another instance applies this user's commands: an answer
			// from this one's store could be stale or empty.
			httpError(w, http.StatusMisdirectedRequest, err)
			return
		case err != nil:
			httpError(w, http.StatusInternalServerError, err)
			return
		}
		writeJSON(w, m)
	})
	mux.HandleFunc("GET /v1/partitions", func(w http.ResponseWriter, _ *http.Request) {
		out := make(map[string]partitionJSON)
		for _, st := range v.Partitions() {
			pj := partitionJSON{State: "restoring", OpenTransactionSeconds: st.OpenTransaction.Seconds(),
				Inputs: make(map[string]inputJSON, len(st.Inputs)), Stalled: st.Stalled}
			for _, in := range st.Inputs {
				pj.Inputs[in.Topic] = inputJSON{NextOffset: in.Next}
			}
			if st.CaughtUp {
				pj.State = "forwarding"
			}
			if r := st.Restore; r != nil {
				pj.Restore = &restoreJSON{Phase: r.Phase, Records: r.Records, RecordsTotal: r.RecordsTotal,
					Bytes: r.Bytes, BytesTotal: r.BytesTotal, ElapsedSeconds: r.Elapsed.Seconds(),
					RecordsPerSecond: r.RecordsPerSecond, BytesPerSecond: r.BytesPerSecond}
			}
			out[strconv.Itoa(int(st.Partition))] = pj
		}
		writeJSON(w, out)
	})
	// The routes are matched before auth runs, so that the audit log
	// names the route; an unknown path is refused like a known one.
	guarded := auth.wrap(mux)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, r.Pattern = mux.Handler(r)
		guarded.ServeHTTP(w, r)
	})
}

// partitionJSON is one partition of /v1/partitions.
type partitionJSON struct {
	State string `json:"state"` // "restoring" or "forwarding"
	// OpenTransactionSeconds is how long a transaction left open on the
	// partition's commands has held its signals; 0 when none does.
	OpenTransactionSeconds float64 `json:"open_transaction_seconds"`
	// Inputs are the partition of every route's input, by topic.
	Inputs map[string]inputJSON `json:"inputs"`
	// Stalled says how the partition makes no progress, while a stall
	// that concerns it lasts (then /readyz says 503); absent otherwise.
	Stalled string `json:"stalled,omitempty"`
	// Restore says how far the partition's restore from the changelog
	// is, while one runs (this instance took the partition over with no
	// state for it); absent otherwise.
	Restore *restoreJSON `json:"restore,omitempty"`
}

// restoreJSON is a restore's progress in /v1/partitions
// (fanout.RestoreProgressInfo).
type restoreJSON struct {
	Phase string `json:"phase"`
	// Records and RecordsTotal are offsets read of those the phase reads.
	Records      int64 `json:"records"`
	RecordsTotal int64 `json:"records_total"`
	// Bytes are the batches fetched as the log holds them, of BytesTotal
	// (the partitions' size; -1 when the brokers do not say).
	Bytes      int64 `json:"bytes"`
	BytesTotal int64 `json:"bytes_total"`
	// ElapsedSeconds is since the restore started; the rates are over
	// the phase so far.
	ElapsedSeconds   float64 `json:"elapsed_seconds"`
	RecordsPerSecond float64 `json:"records_per_second"`
	BytesPerSecond   float64 `json:"bytes_per_second"`
}

// inputJSON is one input's partition in /v1/partitions.
type inputJSON struct {
	// NextOffset is one past the highest offset decided since this
	// instance took the partition over, -1 before the first: a command
	// applied now is enforced from it on.
	NextOffset int64 `json:"next_offset"`
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func httpError(w http.ResponseWriter, code int, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
}
