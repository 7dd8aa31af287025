package main

import (
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// copyDir copies the regular files of src into a new directory, as cp,
// rsync or a file-level backup would: new files with the same bytes.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "copy")
	if err := os.Mkdir(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// TestInstanceIDOfACopiedDataDir: the transactional ID of an instance
// without --transactional-id is kept in its data dir, so a copy of the
// dir (a second instance started from a copy of the first's volume)
// had the same one, and the two fenced each other in turn. A copy is
// refused with what to do; a restart on the same dir, moved or not,
// keeps its id, and the remedies the error names work.
func TestInstanceIDOfACopiedDataDir(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("a copy is told from its original by the inode and birth time of instance-id, read on Linux only")
	}
	orig := filepath.Join(t.TempDir(), "data")
	if err := os.Mkdir(orig, 0o755); err != nil {
		t.Fatal(err)
	}
	id, err := instanceID(orig)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := instanceID(orig); err != nil || again != id {
		t.Fatalf("restart: id %q (%v), want %q", again, err, id)
	}
	// A volume mounted elsewhere on a new pod: the same files.
	moved := filepath.Join(t.TempDir(), "moved")
	if err := os.Rename(orig, moved); err != nil {
		t.Fatal(err)
	}
	if again, err := instanceID(moved); err != nil || again != id {
		t.Fatalf("restart on the moved dir: id %q (%v), want %q", again, err, id)
	}

	cp := copyDir(t, moved)
	_, err = instanceID(cp)
	if err == nil {
		t.Fatalf("a copy of the data dir started with the original's id %s", id)
	}
	for _, want := range []string{cp, "copy", "cohortgate-" + id, "--transactional-id", filepath.Join(cp, "instance-id"), filepath.Join(cp, "instance-home")} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %q: %v", want, err)
		}
	}
	if again, err := instanceID(moved); err != nil || again != id {
		t.Fatalf("the original after the copy: id %q (%v), want %q", again, err, id)
	}

	// The remedies: the copy's own identity, or the original's moved on
	// purpose.
	own := copyDir(t, moved)
	if err := os.Remove(filepath.Join(own, "instance-id")); err != nil {
		t.Fatal(err)
	}
	if other, err := instanceID(own); err != nil || other == id {
		t.Fatalf("a copy without instance-id: id %q (%v), want a new one", other, err)
	}
	if err := os.Remove(filepath.Join(cp, "instance-home")); err != nil {
		t.Fatal(err)
	}
	if same, err := instanceID(cp); err != nil || same != id {
		t.Fatalf("a copy without instance-home: id %q (%v), want the original's %q", same, err, id)
	}
	if same, err := instanceID(cp); err != nil || same != id {
		t.Fatalf("its restart: id %q (%v), want %q", same, err, id)
	}
}
