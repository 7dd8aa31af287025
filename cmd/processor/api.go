package main

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// The membership API (/v1/members, /v1/partitions) says whether a person
// left the community layer: personal data. It is served on its own
// listener (--api-addr), never beside /metrics, and every request must
// carry the bearer token of --api-token-file.

// apiTokenFileName is the token a processor creates in its data dir when
// no --api-token-file is given; `processor status` reads it from the
// default data dir.
const apiTokenFileName = "api-token"

// ensureToken returns the path of the API token: path when given (it
// must hold a token), else dataDir/api-token, created with a random token
// readable by its owner only when absent.
func ensureToken(path, dataDir string) (string, error) {
	if path != "" {
		if _, err := readToken(path); err != nil {
			return "", fmt.Errorf("--api-token-file: %w", err)
		}
		return path, nil
	}
	path = filepath.Join(dataDir, apiTokenFileName)
	if _, err := readToken(path); err == nil {
		return path, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("--api-token-file (default %s): %w", path, err)
	}
	var raw [32]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return "", err
	}
	if err := os.WriteFile(path, []byte(hex.EncodeToString(raw[:])+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("unable to write the API token %s: %w", path, err)
	}
	return path, nil
}

// readToken reads a token file: its content without surrounding space,
// which must not be empty.
func readToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return "", fmt.Errorf("%s is empty: want a token (e.g. head -c 32 /dev/urandom | xxd -p -c 64 > %s)", path, path)
	}
	return tok, nil
}

// bearer guards a handler with the token in a file, read on every
// request so that a rotated Secret takes effect without a restart. It
// answers 401 without credentials, 403 with wrong ones, and logs who
// asked, at most once a second per client address and outcome.
type bearer struct {
	tokenFile string
	log       *slog.Logger
	limit     *logLimiter
}

func (b *bearer) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host, _, _ := net.SplitHostPort(r.RemoteAddr)
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || got == "" {
			b.audit(host, r, "unauthenticated", "")
			w.Header().Set("WWW-Authenticate", `Bearer realm="cohortgate"`)
			httpError(w, http.StatusUnauthorized, errors.New("the membership API needs Authorization: Bearer <the token of --api-token-file>"))
			return
		}
		want, err := readToken(b.tokenFile)
		if err != nil {
			b.log.Error("membership API: unable to read the token; refusing every request", "err", err)
			httpError(w, http.StatusServiceUnavailable, errors.New("the processor cannot read its API token"))
			return
		}
		// Hashes of equal length: the comparison takes the same time
		// whatever the token's length and content.
		g, t := sha256.Sum256([]byte(got)), sha256.Sum256([]byte(want))
		who := hex.EncodeToString(g[:4]) // a fingerprint of the token presented, never the token
		if subtle.ConstantTimeCompare(g[:], t[:]) != 1 {
			b.audit(host, r, "forbidden", who)
			httpError(w, http.StatusForbidden, errors.New("the bearer token is not this processor's"))
			return
		}
		b.audit(host, r, "granted", who)
		next.ServeHTTP(w, r)
	})
}

// audit logs a request to the API: the client's address, the route (not
// the user id asked for), the outcome and the token's fingerprint.
func (b *bearer) audit(host string, r *http.Request, outcome, token string) {
	suppressed, ok := b.limit.allow(host + " " + outcome)
	if !ok {
		return
	}
	level := slog.LevelInfo
	if outcome != "granted" {
		level = slog.LevelWarn
	}
	b.log.Log(r.Context(), level, "membership API request", "client", host, "method", r.Method,
		"route", r.Pattern, "outcome", outcome, "token_sha256_prefix", token, "suppressed_since_last", suppressed)
}

// logLimiter lets one line a second through per key and counts the rest.
// It forgets every key once it holds more than maxKeys, so that a scan
// from many addresses cannot grow it without bound.
type logLimiter struct {
	every   time.Duration
	maxKeys int
	now     func() time.Time
	mu      struct {
		sync.Mutex
		last       map[string]time.Time
		suppressed map[string]int
	}
}

func newLogLimiter(every time.Duration) *logLimiter {
	l := &logLimiter{every: every, maxKeys: 4096, now: time.Now}
	l.mu.last, l.mu.suppressed = make(map[string]time.Time), make(map[string]int)
	return l
}

// allow reports whether a line for key may be logged now, and how many
// were suppressed since the last one.
func (l *logLimiter) allow(key string) (suppressed int, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if last, seen := l.mu.last[key]; seen && now.Sub(last) < l.every {
		l.mu.suppressed[key]++
		return 0, false
	}
	if len(l.mu.last) >= l.maxKeys {
		clear(l.mu.last)
		clear(l.mu.suppressed)
	}
	suppressed = l.mu.suppressed[key]
	l.mu.last[key] = now
	delete(l.mu.suppressed, key)
	return suppressed, true
}
