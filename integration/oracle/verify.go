package oracle

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Options tune Verify. The zero value is ready to use.
type Options struct {
	// Grace is how long Verify waits for open transactions on the five
	// topics to end before it counts the partitions still open as
	// hanging. Default 30s.
	Grace time.Duration
	// ReadTimeout bounds the reading of each topic. Default 5m.
	ReadTimeout time.Duration
	// MaxFutureSkew is the processors' --max-future-skew (rule C4).
	// Default DefaultMaxFutureSkew.
	MaxFutureSkew time.Duration
	// Earlier and ChangelogGrew say how the topics grew during the run,
	// as Config's fields of the same names; the partition count they
	// grew to is the one Verify finds.
	Earlier       []int32
	ChangelogGrew bool
	// Deleted holds, by topic name, the committed records an output topic
	// (a route's cohort topic) held when it was deleted and created again
	// during the run: they were delivered to its readers before the
	// deletion, and are judged with the records the topic holds at the
	// end. Any other topic is refused: the order of the commands and the
	// changelog matters, and their records would be judged out of it.
	Deleted map[string][]Record
	// KafkaOpts are added to the options of Verify's clients (after the
	// seed brokers).
	KafkaOpts []kgo.Opt
}

// Verify reads the topics of a run on brokers and judges them (see
// the package documentation). It first waits, up to opts.Grace, for open
// transactions on the topics to end, then reads each one read_committed up
// to the last stable offsets it saw then; partitions still open count as
// Hanging. The outputs' max.message.bytes is read from the broker
// (Kafka's default when the broker does not say).
func Verify(ctx context.Context, brokers []string, topics Topics, opts *Options) (Report, error) {
	start := time.Now()
	var o Options
	if opts != nil {
		o = *opts
	}
	if o.Grace <= 0 {
		o.Grace = 30 * time.Second
	}
	if o.ReadTimeout <= 0 {
		o.ReadTimeout = 5 * time.Minute
	}
	kopts := append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, o.KafkaOpts...)
	cl, err := kgo.NewClient(kopts...)
	if err != nil {
		return Report{}, err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)

	upTo, open, err := openTransactions(ctx, adm, o.Grace, topics.names())
	if err != nil {
		return Report{}, fmt.Errorf("oracle: verify: %w", err)
	}
	nc := len(upTo[topics.Commands])
	maxBytes := 0
	for _, r := range topics.routes() {
		if ns := len(upTo[r.Signals]); ns != nc {
			return Report{}, fmt.Errorf("oracle: verify: commands topic %s has %d partitions, input %s has %d: they must be equal",
				topics.Commands, nc, r.Signals, ns)
		}
		n, err := maxMessageBytes(ctx, adm, r.Cohort)
		if err != nil {
			return Report{}, fmt.Errorf("oracle: verify: %w", err)
		}
		if maxBytes == 0 || n < maxBytes {
			maxBytes = n
		}
	}
	j, err := NewJudge(Config{Topics: topics, Partitions: int32(nc), Earlier: o.Earlier, ChangelogGrew: o.ChangelogGrew,
		MaxFutureSkew: o.MaxFutureSkew, CohortMaxMessageBytes: maxBytes})
	if err != nil {
		return Report{}, err
	}
	readers := []reader{{topics.Commands, j.AddCommand}, {topics.DLQ, j.AddDLQ}, {topics.Changelog, j.AddChangelog}}
	outputs := make(map[string]int)
	for i, r := range topics.routes() {
		outputs[r.Cohort] = i
		readers = append(readers,
			reader{r.Signals, func(rec Record) { j.AddRouteSignal(i, rec) }},
			reader{r.Cohort, func(rec Record) { j.AddRouteCohort(i, rec) }})
	}
	for topic := range o.Deleted {
		if _, ok := outputs[topic]; !ok {
			return Report{}, fmt.Errorf("oracle: verify: Deleted names %s, which is not an output topic", topic)
		}
	}
	for i, t := range readers {
		rctx, cancel := context.WithTimeout(ctx, o.ReadTimeout)
		err := readPartitions(rctx, kopts, t.topic, upTo[t.topic], t.add)
		cancel()
		if err != nil {
			return Report{}, fmt.Errorf("oracle: verify: %w", err)
		}
		if i == 2 {
			j.Seal() // the commands and the changelog are in: signals outside every episode take 5 bytes
		}
		if route, ok := outputs[t.topic]; ok && i > 2 {
			for _, rec := range o.Deleted[t.topic] {
				j.AddRouteCohort(route, rec)
			}
		}
	}
	rep := j.Report()
	rep.Hanging, rep.HangingDetail = len(open), open
	rep.Took = time.Since(start)
	return rep, nil
}

// readPartitions reads each partition of topic below upTo with a client
// of its own, concurrently, and hands every record to add, one at a time:
// each partition in offset order, partitions interleaved, as the Judge
// takes them. Fetching and decoding, most of the work of reading an
// hour's soak back (up to ~900M records a topic), then run on every core.
func readPartitions(ctx context.Context, opts []kgo.Opt, topic string, upTo map[int32]int64, add func(Record)) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu   sync.Mutex
		wg   sync.WaitGroup
		errs = make([]error, 0, len(upTo))
	)
	for p, end := range upTo {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := ReadTopic(ctx, opts, topic, map[int32]int64{p: end}, func(r *kgo.Record) {
				rec := RecordOf(r)
				mu.Lock()
				add(rec)
				mu.Unlock()
			})
			if err != nil {
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
				cancel() // the others stop too
			}
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// reader hands a topic's records to the Judge.
type reader struct {
	topic string
	add   func(Record)
}

// RecordOf converts a franz-go record.
func RecordOf(r *kgo.Record) Record {
	out := Record{Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value, Timestamp: r.Timestamp.UnixMilli()}
	for _, h := range r.Headers {
		out.Headers = append(out.Headers, Header{Key: h.Key, Value: h.Value})
	}
	return out
}

// maxMessageBytes returns topic's max.message.bytes, or Kafka's default
// when the broker does not report it.
func maxMessageBytes(ctx context.Context, adm *kadm.Client, topic string) (int, error) {
	rcs, err := adm.DescribeTopicConfigs(ctx, topic)
	if err != nil {
		return 0, fmt.Errorf("describing topic %s: %w", topic, err)
	}
	rc, err := rcs.On(topic, nil)
	if err != nil || rc.Err != nil {
		// A broker that does not describe topic configs (kfake) is
		// taken to have Kafka's default.
		return DefaultMaxMessageBytes, nil
	}
	for _, c := range rc.Configs {
		if c.Key == "max.message.bytes" && c.Value != nil {
			n, err := strconv.Atoi(*c.Value)
			if err != nil {
				return 0, fmt.Errorf("topic %s: max.message.bytes %q: %w", topic, *c.Value, err)
			}
			return n, nil
		}
	}
	return DefaultMaxMessageBytes, nil
}
