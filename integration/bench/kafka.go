package main

import (
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/integration/oracle"
	"github.com/cohortgate/cohortgate/integration/workload"
	"github.com/cohortgate/cohortgate/topics"
)

// admin is the harness's own Kafka client: topics, offsets, reading.
type admin struct {
	brokers []string
	cl      *kgo.Client
	adm     *kadm.Client
}

func newAdmin(brokers []string) (*admin, error) {
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.ClientID("cohortgate-bench"))
	if err != nil {
		return nil, err
	}
	return &admin{brokers: brokers, cl: cl, adm: kadm.NewClient(cl)}, nil
}

func (a *admin) close() { a.cl.Close() }

// createTopic creates topic with partitions and the broker's default
// replication; an existing topic is an error, so that a run never reads
// an earlier run's records.
func (a *admin) createTopic(ctx context.Context, topic string, partitions int32) error {
	resp, err := a.adm.CreateTopic(ctx, partitions, -1, nil, topic)
	if err == nil {
		err = resp.Err
	}
	if err != nil {
		return fmt.Errorf("unable to create topic %s: %w", topic, err)
	}
	return nil
}

// deleteTopics deletes the topics that exist among names.
func (a *admin) deleteTopics(ctx context.Context, names ...string) error {
	resps, err := a.adm.DeleteTopics(ctx, names...)
	if err != nil {
		return err
	}
	for _, r := range resps {
		if r.Err != nil && !errors.Is(r.Err, kerr.UnknownTopicOrPartition) {
			return fmt.Errorf("unable to delete topic %s: %w", r.Topic, r.Err)
		}
	}
	return nil
}

// topicsWithPrefix lists the topics whose name starts with prefix.
func (a *admin) topicsWithPrefix(ctx context.Context, prefix string) ([]string, error) {
	td, err := a.adm.ListTopics(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for name := range td {
		if strings.HasPrefix(name, prefix) {
			out = append(out, name)
		}
	}
	return out, nil
}

// offsets are per-partition offsets of one topic.
type offsets map[int32]int64

func (o offsets) sum() int64 {
	var s int64
	for _, v := range o {
		s += v
	}
	return s
}

// endOffsets returns topic's high watermarks.
func (a *admin) endOffsets(ctx context.Context, topic string) (offsets, error) {
	return listed(a.adm.ListEndOffsets(ctx, topic))
}

// stableOffsets returns topic's last stable offsets: where a read_committed
// consumer stops.
func (a *admin) stableOffsets(ctx context.Context, topic string) (offsets, error) {
	return listed(a.adm.ListCommittedOffsets(ctx, topic))
}

func listed(l kadm.ListedOffsets, err error) (offsets, error) {
	if err != nil {
		return nil, err
	}
	if err := l.Error(); err != nil {
		return nil, err
	}
	out := make(offsets)
	l.Each(func(o kadm.ListedOffset) { out[o.Partition] = o.Offset })
	if len(out) == 0 {
		return nil, errors.New("no partitions listed")
	}
	return out, nil
}

// committed returns the group's committed offsets on topic (partitions
// without a commit are absent).
func (a *admin) committed(ctx context.Context, group, topic string) (offsets, error) {
	resp, err := a.adm.FetchOffsets(ctx, group)
	if err != nil {
		return nil, err
	}
	out := make(offsets)
	for p, o := range resp[topic] {
		if o.Err == nil && o.At >= 0 {
			out[p] = o.At
		}
	}
	return out, nil
}

// waitJudged waits, at most within, until group's committed metadata on
// every partition of set's signals topic says every command of that
// partition was judged (the "<event ns>:<judged offset>:<changelog>" the
// processor commits beside its offsets): an owner with an empty data dir
// then restores the partition's users from the changelog rather than
// replaying its commands. progress, if set, is called about every five
// seconds and once at the end with the commands judged, the total, and
// the metadata of partition 0.
func (a *admin) waitJudged(ctx context.Context, group string, set topics.Set, within time.Duration,
	progress func(judged, total int64, meta string)) error {
	end, err := a.endOffsets(ctx, string(set.Commands))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, within)
	defer cancel()
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	var lastPrint time.Time
	for {
		resp, err := a.adm.FetchOffsetsForTopics(ctx, group, string(set.Signals))
		if err == nil {
			var judged int64
			done, meta := true, ""
			for p, e := range end {
				j := int64(0)
				if off, ok := resp.Lookup(string(set.Signals), p); ok && off.Err == nil {
					if parts := strings.Split(off.Metadata, ":"); len(parts) >= 2 {
						j, _ = strconv.ParseInt(parts[1], 10, 64)
					}
					if p == 0 {
						meta = off.Metadata
					}
				}
				judged += min(j, e)
				done = done && j >= e
			}
			if progress != nil && (done || time.Since(lastPrint) >= 5*time.Second) {
				lastPrint = time.Now()
				progress(judged, end.sum(), meta)
			}
			if done {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("group %s never committed every command of %s as judged (%d commands) within %v: %w",
				group, set.Commands, end.sum(), within, ctx.Err())
		case <-tick.C:
		}
	}
}

// outputCount is what a run left in its output topic, read_committed.
type outputCount struct {
	Records    int64 // records, control records excluded
	Distinct   int64 // distinct signal ids among them
	Duplicates int64 // records beyond the first of their signal id
	Took       time.Duration

	seen bitset // the signal ids read
}

// bitset is a set of signal ids.
type bitset []uint64

func newBitset(n int) bitset { return make(bitset, (n+63)/64) }

// add adds id and reports whether it was absent.
func (b bitset) add(id uint64) bool {
	w, bit := id/64, uint64(1)<<(id%64)
	if b[w]&bit != 0 {
		return false
	}
	b[w] |= bit
	return true
}

func (b bitset) has(id uint64) bool {
	w := id / 64
	return w < uint64(len(b)) && b[w]&(uint64(1)<<(id%64)) != 0
}

// countOutput reads topic read_committed up to its last stable offsets and
// counts the signals in it; signals is the number of signal ids of the
// workload (ids 0..signals-1). Reading is bounded by ctx.
func (a *admin) countOutput(ctx context.Context, topic string, signals int) (outputCount, error) {
	start := time.Now()
	var out outputCount
	upTo, err := a.stableOffsets(ctx, topic)
	if err != nil {
		return out, fmt.Errorf("output %s: %w", topic, err)
	}
	seen := newBitset(signals)
	out.seen = seen
	err = oracle.ReadTopic(ctx, readerOpts(a.brokers), topic, upTo, func(r *kgo.Record) {
		out.Records++
		id, err := workload.ParseSignalID(r.Value)
		if err != nil || id >= uint64(signals) {
			return // no signal of the workload
		}
		if !seen.add(id) {
			out.Duplicates++
			return
		}
		out.Distinct++
	})
	out.Took = time.Since(start)
	return out, err
}

// readerOpts are the options of the clients that read a run's topics (with
// oracle.ReadTopic: read_committed, retriable fetch errors waited out).
func readerOpts(brokers []string) []kgo.Opt {
	return []kgo.Opt{kgo.SeedBrokers(brokers...), kgo.ClientID("cohortgate-bench-reader")}
}

// brokerVersion describes the broker: the version the project's broker
// script reports if it is there, else franz-go's guess from the API
// versions the broker answers with.
func (a *admin) brokerVersion(ctx context.Context, script string) string {
	if script != "" {
		ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
		defer cancel()
		if out, err := exec.CommandContext(ctx, "bash", script, "version").Output(); err == nil {
			if v := strings.TrimSpace(string(out)); v != "" {
				return "Apache " + v
			}
		}
	}
	vs, err := a.adm.ApiVersions(ctx)
	if err != nil {
		return "unknown"
	}
	for _, v := range vs.Sorted() {
		if v.Err == nil {
			return "Kafka " + v.VersionGuess() + " (guessed from its API versions)"
		}
	}
	return "unknown"
}
