package integration

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/cohortgate/cohortgate/pkg/fanout"
	"github.com/cohortgate/cohortgate/topics"
)

// TestMemberOnlyFromTheOwner: with two instances, a user leaves in the
// partition one of them owns. The other's store never saw the leave: it
// must say it does not own the user, naming the partition, rather than
// answer "active".
func TestMemberOnlyFromTheOwner(t *testing.T) {
	const parts = 2
	e := newEnv(t, parts)
	a := e.start(t.TempDir(), e.config())
	a.waitReady(t, parts)
	b := e.start(t.TempDir(), e.config())
	eventually(t, 60*time.Second, func() error {
		for _, pr := range []*proc{a, b} {
			if ok, why := pr.Ready(); !ok {
				return errors.New(why)
			}
			if n := len(pr.Partitions()); n != 1 {
				return fmt.Errorf("an instance owns %d partitions, want 1 each", n)
			}
		}
		return nil
	})
	const user = 7
	part := murmur2Partition(topics.AppendUserID(nil, user), parts)
	owner, other := a, b
	if b.Partitions()[0].Partition == part {
		owner, other = b, a
	}
	e.command(topics.Leave, user, base())
	eventually(t, 30*time.Second, func() error {
		if m, err := owner.Member(user); err != nil || m.Status != "left" {
			return fmt.Errorf("the owner says %+v, %v; want left", m, err)
		}
		return nil
	})
	m, err := other.Member(user)
	var notOwner *fanout.NotOwnerError
	if !errors.As(err, &notOwner) || notOwner.Partition != part || notOwner.CatchingUp {
		t.Fatalf("the instance that does not own partition %d answers %+v, %v; want a NotOwnerError naming the partition", part, m, err)
	}
}
