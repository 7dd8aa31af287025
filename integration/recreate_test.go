package integration

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/topics"
)

// Topics are known by their IDs (pkg/fanout/topicids.go): these tests
// delete a topic and create it again under a running processor, as an
// operator may, and check that it notices within seconds and goes on: an
// input restarted from the new topic's beginning, an output produced to
// again, the changelog refilled; the commands topic halts it.

// recreateWithin bounds how long a running processor takes to go on after
// one of its topics was created again: its watcher's interval, a new run's
// start and a group join, with room for a loaded machine.
const recreateWithin = 45 * time.Second

// recreate deletes topic and creates it again with the env's partition
// count and the topic's configs, waits until the broker lists the new
// topic ID, and makes the test's own client forget the old one (franz-go
// never adopts a new ID). It returns the new ID.
func (e *env) recreate(topic topics.Topic) kadm.TopicID {
	e.t.Helper()
	ctx := e.ctx(90 * time.Second)
	name := string(topic)
	before, err := e.adm.ListTopics(ctx, name)
	if err != nil {
		e.t.Fatal(err)
	}
	old := before[name].ID
	resp, err := e.adm.DeleteTopics(ctx, name)
	if err == nil {
		err = resp.Error()
	}
	if err != nil {
		e.t.Fatalf("delete %s: %v", name, err)
	}
	configs := make(map[string]*string)
	for _, s := range e.set.Specs() {
		if s.Topic == topic {
			for k, v := range s.Configs {
				configs[k] = &v
			}
		}
	}
	var id kadm.TopicID
	eventually(e.t, 30*time.Second, func() error {
		r, err := e.adm.CreateTopic(ctx, e.parts, 1, configs, name)
		if err == nil {
			err = r.Err
		}
		id = r.ID
		return err
	})
	e.cl.PurgeTopicsFromClient(name)
	eventually(e.t, 30*time.Second, func() error {
		td, err := e.adm.ListTopics(ctx, name)
		if err != nil {
			return err
		}
		if d, ok := td[name]; !ok || d.Err != nil || d.ID != id || int32(len(d.Partitions)) != e.parts {
			return fmt.Errorf("%s: not listed as topic ID %v yet", name, id)
		}
		return nil
	})
	if id == old {
		e.t.Fatalf("%s created again under its old ID %v", name, id)
	}
	return id
}

// waitForwarded waits until every value of want is on the cohort topic.
func (e *env) waitForwarded(d time.Duration, want ...string) {
	e.t.Helper()
	eventually(e.t, d, func() error {
		got := e.forwardedValues()
		for _, v := range want {
			if !slices.Contains(got, v) {
				return fmt.Errorf("%s not forwarded yet (%d forwarded)", v, len(got))
			}
		}
		return nil
	})
}

// TestCohortRecreatedWhileRunningResumes: the cohort topic deleted and
// created again under a running processor. franz-go keeps the old topic
// ID and fails every produce with UNKNOWN_TOPIC_ID: every cycle carrying
// a forwarded signal aborted, for ever. The processor now notices the new
// ID and produces to it, with a fresh session.
func TestCohortRecreatedWhileRunningResumes(t *testing.T) {
	e := newEnv(t, 2)
	pr := e.start(t.TempDir(), e.config())
	pr.waitReady(t, 2)
	t0 := time.Now()
	e.command(topics.Leave, 2, t0.Add(-time.Hour))
	e.signal(1, t0, "before")
	e.waitForwarded(30*time.Second, "before")

	e.recreate(e.set.Cohort)
	e.signal(1, t0, "after-1")
	e.signal(2, t0, "left-2")
	e.signal(3, t0, "after-3")
	e.waitForwarded(recreateWithin, "after-1", "after-3")
	e.waitDecided()
	e.assertForwarded([]string{"after-1", "after-3"}, []string{"left-2", "before"})
}

// TestDLQRecreatedWhileRunningResumes is the cohort's test for the DLQ.
func TestDLQRecreatedWhileRunningResumes(t *testing.T) {
	e := newEnv(t, 2)
	pr := e.start(t.TempDir(), e.config())
	pr.waitReady(t, 2)
	bad := func(v string) {
		e.produce(&kgo.Record{Topic: string(e.set.Signals), Key: []byte("not-a-user"), Value: []byte(v), Timestamp: time.Now()})
	}
	bad("bad-before")
	e.waitRecords(e.set.DLQ, 1)

	e.recreate(e.set.DLQ)
	bad("bad-after")
	e.signal(1, time.Now(), "good-after")
	e.waitForwarded(recreateWithin, "good-after")
	rs := e.waitRecords(e.set.DLQ, 1)
	if len(rs) != 1 || string(rs[0].Value) != "bad-after" {
		var vs []string
		for _, r := range rs {
			vs = append(vs, string(r.Value))
		}
		t.Errorf("new DLQ holds %q; want [bad-after]", vs)
	}
}
