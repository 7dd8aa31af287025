package membership

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// spread maps i to a distinct user ID spread over the whole u64 range (the
// multiplier is odd, so the map is a bijection), as real user IDs are.
func spread(i uint64) uint64 { return i * 0x9e3779b97f4a7c15 }

// BenchmarkRestore restores 1M members from a store on disk that was
// compacted, closed and reopened, as on a restart. Members have one episode:
// "open" members are Left (one record each), "closed" members are Active
// after one leave (two records each). The pebble-floor runs scan the same
// records without decoding or delivering them: the cost of Pebble's iterator
// alone, which bounds Restore.
func BenchmarkRestore(b *testing.B) {
	const members = 1_000_000
	for _, shape := range []string{"open", "closed"} {
		b.Run(shape, func(b *testing.B) {
			s := restoreFixture(b, shape, members)
			b.Run("restore", func(b *testing.B) {
				var last RestoreStats
				var sum uint64
				for b.Loop() {
					var err error
					last, err = s.Restore(context.Background(), func(m Member) error {
						sum += m.UserID + uint64(len(m.History))
						return nil
					})
					if err != nil {
						b.Fatal(err)
					}
				}
				if last.Members != members {
					b.Fatalf("restored %d members, want %d", last.Members, members)
				}
				b.ReportMetric(float64(members)*float64(b.N)/b.Elapsed().Seconds(), "members/s")
			})
			b.Run("pebble-floor", func(b *testing.B) {
				for b.Loop() {
					it, err := s.db.NewIter(&pebble.IterOptions{LowerBound: []byte{spaceUsers}, UpperBound: []byte{spaceUsers + 1}})
					if err != nil {
						b.Fatal(err)
					}
					for valid := it.First(); valid; valid = it.Next() {
						_ = it.Key()
						_, _ = it.ValueAndErr()
					}
					if err := it.Close(); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(members)*float64(b.N)/b.Elapsed().Seconds(), "members/s")
			})
		})
	}
}

// restoreFixture writes members of the given shape to a store on disk,
// compacts, closes and reopens it.
func restoreFixture(b *testing.B, shape string, members uint64) *Store {
	b.Helper()
	dir := b.TempDir()
	s, err := Open(dir, nil)
	if err != nil {
		b.Fatal(err)
	}
	// Write the records directly: this measures Restore, not the write
	// path.
	pb := s.db.NewBatch()
	for i := range members {
		u := spread(i)
		left := 1764633600000000000 + i
		if shape == "closed" {
			hv := encodeHistory(Episode{left, left + 1e9})
			_ = pb.Set(appendHistoryKey(nil, u, left), hv[:], nil)
			sv := encodeState(CommunityMembership{UserID: u, Status: Active})
			_ = pb.Set(appendStateKey(nil, u), sv[:], nil)
		} else {
			sv := encodeState(CommunityMembership{UserID: u, Status: Left, LeftAtNs: left})
			_ = pb.Set(appendStateKey(nil, u), sv[:], nil)
		}
		if pb.Len() > 4<<20 {
			if err := pb.Commit(pebble.NoSync); err != nil {
				b.Fatal(err)
			}
			pb = s.db.NewBatch()
		}
	}
	if err := pb.Commit(pebble.Sync); err != nil {
		b.Fatal(err)
	}
	if err := s.db.Compact(context.Background(), []byte{spaceUsers}, []byte{spaceUsers + 1}, true); err != nil {
		b.Fatal(err)
	}
	if err := s.Close(); err != nil {
		b.Fatal(err)
	}
	if s, err = Open(dir, nil); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	return s
}

// BenchmarkBatchApply applies commands (a leave, then a rejoin, per user)
// with one synced commit per N commands, on disk.
func BenchmarkBatchApply(b *testing.B) {
	for _, n := range []int{1, 100, 1000} {
		b.Run(fmt.Sprintf("commit=%d", n), func(b *testing.B) {
			s, err := Open(b.TempDir(), &Options{FS: vfs.Default})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			batch := s.NewBatch()
			i := uint64(0)
			for b.Loop() {
				op := OpLeave + Op(i&1)
				if _, err := batch.Apply(Command{Op: op, UserID: spread(i >> 1), AtNs: 1764633600000000000 + i}); err != nil {
					b.Fatal(err)
				}
				i++
				if batch.Len() == n {
					if err := batch.Commit(); err != nil {
						b.Fatal(err)
					}
					batch = s.NewBatch()
				}
			}
			if err := batch.Commit(); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "commands/s")
		})
	}
}

// BenchmarkUserBytes reports what the store keeps of one user (its dump,
// as a changelog record's restore header carries it) after n commands:
// n re-sent leaves (the identity window caps them), and n alternating
// leaves and rejoins (n/2 episodes: what the rules must keep, up to
// MaxHistory). Run with -benchtime=1x; the figure is bytes, not time.
func BenchmarkUserBytes(b *testing.B) {
	for _, kind := range []string{"resent-leaves", "episodes"} {
		for _, n := range []int{1, 1000, 100000} {
			b.Run(fmt.Sprintf("%s/n=%d", kind, n), func(b *testing.B) {
				var size int
				for b.Loop() {
					s := openMem(b)
					for i := range n {
						c := Command{Op: OpLeave, UserID: 7, AtNs: 100, RequestID: fmt.Sprint("resend-", i)}
						if kind == "episodes" {
							c = Command{Op: OpLeave, UserID: 7, AtNs: uint64(100 + i), RequestID: fmt.Sprint("c-", i)}
							if i%2 == 1 {
								c.Op = OpRejoin
							}
						}
						// Past MaxHistory episodes a rejoin is refused: the
						// cap is what bounds the user.
						if _, err := s.Apply(c); err != nil && !errors.Is(err, ErrHistoryFull) {
							b.Fatal(err)
						}
					}
					size = userBytes(b, s, 7)
				}
				b.ReportMetric(float64(size), "user-bytes")
				b.ReportMetric(0, "ns/op")
			})
		}
	}
}
