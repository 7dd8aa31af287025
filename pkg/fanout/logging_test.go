package fanout

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/cohortgate/cohortgate/pkg/gate"
	"github.com/cohortgate/cohortgate/pkg/membership"
)

// TestRestoreLogLevel: a start on an empty data dir (no snapshot, nobody
// in the store) is normal and logs at INFO; a store with members and no
// snapshot (a stop that was not clean), or a snapshot that does not
// match, is not and logs a WARN.
func TestRestoreLogLevel(t *testing.T) {
	empty, err := membership.Open("", &membership.Options{FS: vfs.NewMem()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { empty.Close() })
	corrupt := filepath.Join(t.TempDir(), "gate.snapshot")
	if err := os.WriteFile(corrupt, []byte("not a snapshot"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		store *membership.Store
		path  string
		level string
	}{
		{"first start", empty, filepath.Join(t.TempDir(), "gate.snapshot"), "INFO"},
		{"members, no snapshot", snapshotStore(t, 10), filepath.Join(t.TempDir(), "gate.snapshot"), "WARN"},
		{"empty store, corrupt snapshot", empty, corrupt, "WARN"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			info, err := restoreGate(context.Background(), tc.store, gate.New(), gateSnapshot{path: tc.path, topic: snapTopic}, nil)
			if err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			MakeLoggingEventListener(slog.New(slog.NewJSONHandler(&buf, nil))).Restored(info)
			var levels []string
			for line := range strings.Lines(buf.String()) {
				var rec struct{ Level, Msg string }
				if err := json.Unmarshal([]byte(line), &rec); err != nil {
					t.Fatalf("log line %q: %v", line, err)
				}
				if rec.Level != "INFO" || !strings.HasPrefix(rec.Msg, "restored") {
					levels = append(levels, rec.Level)
				}
			}
			if len(levels) != 1 || levels[0] != tc.level {
				t.Errorf("restore without a usable snapshot logged at %v, want one %s line:\n%s", levels, tc.level, buf.String())
			}
		})
	}
}

// TestCaughtUpLogNamesAnOffset: the caught-up line gives the next commands
// offset under a name that says it is one (an "applied=" read as a count
// of commands applied, which it is not once a start resumes from a
// committed offset).
func TestCaughtUpLogNamesAnOffset(t *testing.T) {
	var buf bytes.Buffer
	MakeLoggingEventListener(slog.New(slog.NewTextHandler(&buf, nil))).CaughtUp(CaughtUpInfo{Partition: 3, Applied: 1200, Took: time.Second})
	line := buf.String()
	if !strings.Contains(line, " next_command_offset=1200 ") || strings.Contains(line, "applied=") {
		t.Errorf("caught-up line %q: want next_command_offset=1200 and no applied=", line)
	}
}
