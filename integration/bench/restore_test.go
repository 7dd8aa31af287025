package main

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	"github.com/cohortgate/cohortgate/pkg/membership"
)

func TestMemberIDs(t *testing.T) {
	ids := memberIDs(10_000)
	if len(ids) != 10_000 {
		t.Fatalf("%d ids, want 10000", len(ids))
	}
	for i, id := range ids {
		if id == 0 || (i > 0 && id <= ids[i-1]) {
			t.Fatalf("ids[%d] = %d after %d: want distinct, ascending, non-zero ids", i, id, ids[max(i-1, 0)])
		}
	}
	if !slices.Equal(ids, memberIDs(10_000)) {
		t.Fatal("memberIDs is not deterministic")
	}
}

func TestBuildBulkStore(t *testing.T) {
	dir := t.TempDir()
	const n = 2_000
	took, err := buildBulkStore(context.Background(), dir, n, func(int) {})
	if err != nil || took == 0 {
		t.Fatalf("buildBulkStore = %v, %v; want a build", took, err)
	}
	if took, err = buildBulkStore(context.Background(), dir, n, func(int) {}); err != nil || took != 0 {
		t.Fatalf("second buildBulkStore = %v, %v; want the cached store", took, err)
	}
	s, err := membership.Open(filepath.Join(dir, "membership"), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, id := range []uint64{memberIDs(n)[0], memberIDs(n)[n-1]} {
		st, err := s.Status(id)
		if err != nil || st.Status != membership.Left {
			t.Fatalf("Status(%d) = %+v, %v; want Left", id, st, err)
		}
	}
}
