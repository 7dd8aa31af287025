package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// A transactional ID must be stable across restarts of one instance (a
// restart fences the transaction its previous run left open) and
// distinct between instances: two producers with one ID fence each other
// in turn, each replacing its session and fencing the other again. Without
// --transactional-id the ID is kept in the data dir (instance-id), so a
// copy of the dir (cp, rsync, a file-level backup restored beside the
// original) would carry it to a second instance.
//
// A copy is told from its original by where instance-id was made: its
// inode number and, where the file system keeps it, its birth time,
// recorded beside it (instance-home) when the id is made. A copy's
// instance-id is a new file: another inode or another birth time. The same
// dir mounted on a new pod or host, or moved within its file system, is
// the same file and keeps its ID. A block-level clone of the volume copies
// the inode and birth time too and is not told apart: give instances their
// own --transactional-id (the Kubernetes example uses the pod name).

// fileHome is where a file was made: its inode number, and its birth time
// in ns since the epoch (0 where the file system does not say).
type fileHome struct {
	ino, btimeNs uint64
}

func (h fileHome) encode() string { return fmt.Sprintf("ino=%d btime_ns=%d\n", h.ino, h.btimeNs) }

func parseHome(s string) (fileHome, error) {
	var h fileHome
	_, err := fmt.Sscanf(strings.TrimSpace(s), "ino=%d btime_ns=%d", &h.ino, &h.btimeNs)
	return h, err
}

// same reports whether h and o are one file's home: the same inode, and
// the same birth time where both know it.
func (h fileHome) same(o fileHome) bool {
	return h.ino == o.ino && (h.btimeNs == 0 || o.btimeNs == 0 || h.btimeNs == o.btimeNs)
}

func (h fileHome) String() string {
	if h.btimeNs == 0 {
		return fmt.Sprintf("inode %d", h.ino)
	}
	return fmt.Sprintf("inode %d, made %s", h.ino, time.Unix(0, int64(h.btimeNs)).UTC().Format(time.RFC3339Nano))
}

// checkHome checks that dataDir's instance-id (of id) is the file its
// instance-home names, recording it when instance-home is absent (a new
// id, or a dir of a version that kept none). Where homeOf can tell
// nothing, nothing is checked.
func checkHome(dataDir, id string) error {
	idPath, homePath := filepath.Join(dataDir, "instance-id"), filepath.Join(dataDir, "instance-home")
	now, ok, err := homeOf(idPath)
	if err != nil {
		return fmt.Errorf("unable to read where %s was made: %w", idPath, err)
	}
	if !ok {
		return nil
	}
	b, err := os.ReadFile(homePath)
	if errors.Is(err, os.ErrNotExist) {
		if err := os.WriteFile(homePath, []byte(now.encode()), 0o644); err != nil {
			return fmt.Errorf("unable to write %s: %w", homePath, err)
		}
		return nil
	}
	if err != nil {
		return fmt.Errorf("unable to read %s: %w", homePath, err)
	}
	was, err := parseHome(string(b))
	if err != nil {
		return fmt.Errorf("%s: want \"ino=N btime_ns=N\", have %q (delete it to record where %s is now)", homePath, strings.TrimSpace(string(b)), idPath)
	}
	if now.same(was) {
		return nil
	}
	return fmt.Errorf("data dir %s looks like a copy of another instance's: %s is %s, and %s says it was made as %s. "+
		"Started beside the original, the two would share the transactional ID cohortgate-%s and fence each other in turn. "+
		"To run this copy as an instance of its own, delete %s (it gets a new ID and keeps its store, as an instance "+
		"restarted after a while would) or start it with --transactional-id; if it is the same instance moved on "+
		"purpose (a restored backup) and the original no longer runs, delete %s to keep its ID",
		dataDir, idPath, now, homePath, was, id, idPath, homePath)
}
