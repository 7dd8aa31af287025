package oracle

import (
	"context"
	"fmt"
	"strconv"
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
	// KafkaOpts are added to the options of Verify's clients (after the
	// seed brokers).
	KafkaOpts []kgo.Opt
}

// Verify reads the five topics of a run on brokers and judges them (see
// the package documentation). It first waits, up to opts.Grace, for open
// transactions on the topics to end, then reads each one read_committed up
// to the last stable offsets it saw then; partitions still open count as
// Hanging. The cohort topic's max.message.bytes is read from the broker
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
	nc, ns := len(upTo[topics.Commands]), len(upTo[topics.Signals])
	if nc != ns {
		return Report{}, fmt.Errorf("oracle: verify: commands topic %s has %d partitions, signals topic %s has %d: they must be equal",
			topics.Commands, nc, topics.Signals, ns)
	}
	maxBytes, err := maxMessageBytes(ctx, adm, topics.Cohort)
	if err != nil {
		return Report{}, fmt.Errorf("oracle: verify: %w", err)
	}
	j, err := NewJudge(Config{Topics: topics, Partitions: int32(nc), MaxFutureSkew: o.MaxFutureSkew, CohortMaxMessageBytes: maxBytes})
	if err != nil {
		return Report{}, err
	}
	for _, t := range []struct {
		topic string
		add   func(Record)
	}{
		{topics.Commands, j.AddCommand},
		{topics.Signals, j.AddSignal},
		{topics.Cohort, j.AddCohort},
		{topics.DLQ, j.AddDLQ},
		{topics.Changelog, j.AddChangelog},
	} {
		rctx, cancel := context.WithTimeout(ctx, o.ReadTimeout)
		err := readTopic(rctx, kopts, t.topic, upTo[t.topic], func(r *kgo.Record) { t.add(recordOf(r)) })
		cancel()
		if err != nil {
			return Report{}, fmt.Errorf("oracle: verify: %w", err)
		}
	}
	rep := j.Report()
	rep.Hanging, rep.HangingDetail = len(open), open
	rep.Took = time.Since(start)
	return rep, nil
}

// recordOf converts a franz-go record.
func recordOf(r *kgo.Record) Record {
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
