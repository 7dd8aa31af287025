package integration

import (
	"fmt"
	"hash/crc32"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/pkg/fanout"
	"github.com/cohortgate/cohortgate/topics"
)

// murmur2Partition is the partition franz-go's (and Java's) default
// partitioner gives key among n.
func murmur2Partition(key []byte, n int) int32 {
	return int32(kgo.StickyKeyPartitioner(nil).ForTopic("").Partition(&kgo.Record{Key: key}, n))
}

// TestScaleOutHandsOverState runs two processors in one group, then stops
// one and starts it again: every partition is owned by one of them at a
// time, a new owner catches up with the commands before forwarding, and the
// output holds each allowed signal once.
func TestScaleOutHandsOverState(t *testing.T) {
	const parts = 4
	e := newEnv(t, parts)
	cfgA, cfgB := e.config(), e.config()
	cfgB.TransactionalID = cfgA.TransactionalID + "-b"
	cfgA.SessionTimeout, cfgB.SessionTimeout = 6*time.Second, 6*time.Second
	a := e.start(t.TempDir(), cfgA)
	dirB := t.TempDir()
	b := e.start(dirB, cfgB)
	eventually(t, 90*time.Second, func() error {
		pa, pb := owned(a), owned(b)
		if len(pa)+len(pb) != parts || len(pa) == 0 || len(pb) == 0 {
			return fmt.Errorf("a owns %v, b owns %v", pa, pb)
		}
		if ok, why := a.Ready(); !ok {
			return fmt.Errorf("a: %s", why)
		}
		if ok, why := b.Ready(); !ok {
			return fmt.Errorf("b: %s", why)
		}
		return nil
	})
	for p := range owned(a) {
		if _, both := owned(b)[p]; both {
			t.Fatalf("partition %d owned by both instances", p)
		}
	}

	// One leaver per partition, so that every instance applies leaves.
	t0 := base()
	var leavers []uint64
	for u := uint64(1); len(leavers) < parts && u < 1000; u++ {
		if int(murmur2Partition(topics.AppendUserID(nil, u), parts)) == len(leavers) {
			leavers = append(leavers, u)
		}
	}
	var sigs []sig
	for _, u := range leavers {
		e.command(topics.Leave, u, t0.Add(10*time.Second))
		sigs = append(sigs, sig{u, 5 * time.Second, true}, sig{u, 15 * time.Second, false}, sig{u + 1000, 15 * time.Second, true})
	}
	waitApplied(t, "left", 0, leavers, a, b)
	want := e.produceSignals(t0, sigs)
	e.waitDecided()

	// B leaves: A takes every partition over, catching up with B's
	// commands from its own store's checkpoints before forwarding.
	if err := b.stop(t); err != nil {
		t.Fatalf("b: %v", err)
	}
	a.waitReady(t, parts)
	var more []sig
	for _, u := range leavers {
		more = append(more, sig{u, 20 * time.Second, false}, sig{u + 1000, 20 * time.Second, true})
	}
	want = append(want, e.produceSignals(t0, more)...)
	e.waitDecided()

	// B comes back with its old store; the group splits the partitions again.
	b = e.start(dirB, cfgB)
	eventually(t, 90*time.Second, func() error {
		if len(b.Partitions()) == 0 {
			return fmt.Errorf("b owns nothing yet")
		}
		if ok, why := b.Ready(); !ok {
			return fmt.Errorf("b: %s", why)
		}
		return nil
	})
	var last []sig
	for _, u := range leavers {
		last = append(last, sig{u, 30 * time.Second, false}, sig{u + 1000, 30 * time.Second, true})
	}
	want = append(want, e.produceSignals(t0, last)...)
	e.waitDecided()
	slices.Sort(want)
	if got := e.forwardedValues(); !slices.Equal(got, want) {
		t.Fatalf("forwarded\n %v\nwant each once\n %v", got, want)
	}
}

// crc32Partition is the partition librdkafka's default partitioner
// (consistent_random: CRC32 of the key) gives key among n.
func crc32Partition(key []byte, n int) int32 {
	return int32(crc32.ChecksumIEEE(key) % uint32(n))
}

// TestMisroutedRecordsAreRepublished has kcat produce with librdkafka's
// default partitioner (CRC32), so the leave and the signals of a user land
// in partitions other than their murmur2 ones, owned by either of two
// instances. Each record must be re-published to its key's murmur2
// partition and take effect there: the leave gates the user's later
// signals, the earlier ones are forwarded once.
func TestMisroutedRecordsAreRepublished(t *testing.T) {
	kcatPath(t)
	const parts = 4
	e := newEnv(t, parts)
	cfgA, cfgB := e.config(), e.config()
	cfgB.TransactionalID = cfgA.TransactionalID + "-b"
	a := e.start(t.TempDir(), cfgA)
	b := e.start(t.TempDir(), cfgB)
	eventually(t, 90*time.Second, func() error {
		if n := len(a.Partitions()) + len(b.Partitions()); n != parts {
			return fmt.Errorf("%d of %d partitions owned", n, parts)
		}
		return nil
	})

	var user, other uint64
	for u := uint64(1); u < 10000 && (user == 0 || other == 0); u++ {
		k := topics.AppendUserID(nil, u)
		misrouted := crc32Partition(k, parts) != murmur2Partition(k, parts)
		if misrouted && user == 0 {
			user = u
		} else if misrouted && other == 0 {
			other = u
		}
	}
	kcatProduce := func(topic, delim, lines string) {
		kcat(t, lines, "-P", "-t", topic, "-K"+delim) // librdkafka's default partitioner
	}
	// kcat stamps records with the wall clock, so the leave's boundary
	// is taken between the two batches of signals.
	line := func(u uint64, v string) string { return fmt.Sprintf("%d:%s\n", u, v) }
	kcatProduce(string(e.set.Signals), ":", line(user, "before")+line(other, "before"))
	eventually(t, 60*time.Second, func() error {
		if n := metricValue(t, a.reg, fanout.MetricMisrouted, nil) + metricValue(t, b.reg, fanout.MetricMisrouted, nil); n < 2 {
			return fmt.Errorf("%v misrouted signals re-published", n)
		}
		return nil
	})
	e.waitDecided()
	boundary := time.Now()
	leave := topics.AppendCommand(nil, topics.Command{Op: topics.Leave, UserID: user, AtNs: uint64(boundary.UnixNano()), HasAt: true})
	kcatProduce(string(e.set.Commands), "|", strconv.FormatUint(user, 10)+"|"+string(leave)+"\n")
	eventually(t, 60*time.Second, func() error {
		for _, pr := range []*proc{a, b} {
			if m, err := pr.Member(user); err == nil && m.Status == "left" {
				return nil
			}
		}
		return fmt.Errorf("the misrouted leave of user %d has not taken effect", user)
	})
	kcatProduce(string(e.set.Signals), ":", line(user, "after")+line(other, "after"))
	e.waitDecided()

	want := []string{"before", "before", "after"}
	var got []string
	for _, r := range e.readAll(e.set.Cohort) {
		got = append(got, string(r.Value))
		if wantP := murmur2Partition(r.Key, parts); r.Partition != wantP {
			t.Errorf("forwarded %s in cohort partition %d, want %d", r.Key, r.Partition, wantP)
		}
		if string(r.Key) == strconv.FormatUint(user, 10) && string(r.Value) == "after" {
			t.Errorf("user %d's signal after the leave was forwarded", user)
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("forwarded %v, want %v (each once)", got, want)
	}
}

// owned returns the partitions p owns and whether each caught up.
func owned(p *proc) map[int32]bool {
	out := make(map[int32]bool)
	for _, st := range p.Partitions() {
		out[st.Partition] = st.CaughtUp
	}
	return out
}
