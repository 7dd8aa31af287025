package membership

import (
	"fmt"
	"strings"
	"testing"

	"github.com/cockroachdb/pebble/v2/vfs"
)

// openMem opens a store on a fresh in-memory file system and closes it when
// the test ends.
func openMem(t testing.TB) *Store {
	t.Helper()
	return openFS(t, vfs.NewMem(), nil)
}

// openFS opens the store "db" on fs with opts (which may be nil) and closes
// it when the test ends.
func openFS(t testing.TB, fs vfs.FS, opts *Options) *Store {
	t.Helper()
	var o Options
	if opts != nil {
		o = *opts
	}
	o.FS = fs
	s, err := Open("db", &o)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil && err != ErrClosed {
			t.Errorf("Close: %v", err)
		}
	})
	return s
}

// dump returns every record of the store, one "key value" line in hex each,
// in key order.
func dump(t testing.TB, s *Store) string {
	t.Helper()
	it, err := s.db.NewIter(nil)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for valid := it.First(); valid; valid = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%x %x\n", it.Key(), v)
	}
	if err := it.Close(); err != nil {
		t.Fatal(err)
	}
	return b.String()
}
