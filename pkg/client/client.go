package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"

	"github.com/cohortgate/cohortgate/pkg/kafkasec"
	"github.com/cohortgate/cohortgate/topics"
)

// Client publishes membership commands and reads their receipts. Make it
// with [New]; it is safe for concurrent use.
type Client struct {
	cl     *kgo.Client
	own    bool      // cl was built by New, and Close closes it
	base   []kgo.Opt // how the readers WaitReceipt and Status make connect: cl's connection settings
	topics topics.Set
	now    func() time.Time

	mu struct {
		sync.Mutex
		// partitions caches each topic's partition count, to compute a
		// key's partition; refreshed when a record lands elsewhere.
		partitions map[topics.Topic]int
	}
}

// Opt configures [New].
type Opt interface{ apply(*cfg) }

type opt func(*cfg)

func (o opt) apply(c *cfg) { o(c) }

type cfg struct {
	brokers  []string
	security *kafkasec.Config
	kgoOpts  []kgo.Opt
	kafka    *kgo.Client
	topics   topics.Set
	now      func() time.Time
}

// Brokers are the seed brokers, host:port, of the client New builds.
// Exactly one of Brokers and [KafkaClient] is required.
func Brokers(seeds ...string) Opt {
	return opt(func(c *cfg) { c.brokers = append(c.brokers, seeds...) })
}

// Security is how the client New builds connects: TLS and SASL, as the
// processor's --kafka-tls* and --kafka-sasl* flags say. New validates it
// (reading its files); a zero CheckTimeout takes the default. Not with
// [KafkaClient], whose connection is the caller's.
func Security(s kafkasec.Config) Opt {
	return opt(func(c *cfg) { c.security = &s })
}

// KafkaOpts are more franz-go options for the client New builds, applied
// after New's own (seed brokers, security, Kafka's default partitioner,
// client id "cohortgate-client"). A partitioner given here that does not
// place keys as Kafka's default does makes every publish fail with a
// [*MisroutedError].
func KafkaOpts(opts ...kgo.Opt) Opt {
	return opt(func(c *cfg) { c.kgoOpts = append(c.kgoOpts, opts...) })
}

// KafkaClient publishes with the caller's client instead of building one;
// Close leaves it open. Its partitioner must place keyed records as
// Kafka's default does — franz-go's default and StickyKeyPartitioner(nil)
// do — or publishes fail with a [*MisroutedError]. WaitReceipt and Status
// read with clients of their own made with its connection settings (seed
// brokers, TLS or dialer, SASL, client id, logger; not its hooks).
func KafkaClient(cl *kgo.Client) Opt {
	return opt(func(c *cfg) { c.kafka = cl })
}

// Topics names the topics; the client uses Commands, Changelog and DLQ.
// Default [topics.Defaults].
func Topics(s topics.Set) Opt {
	return opt(func(c *cfg) { c.topics = s })
}

// Clock stamps every command's record, and so its boundary when it has no
// at_ns, and is what [At] is checked against. Default time.Now.
func Clock(now func() time.Time) Opt {
	return opt(func(c *cfg) { c.now = now })
}

// New returns a Client. It validates every option, reporting each problem
// on a line of its own, and does not connect: the first publish or read
// does.
func New(opts ...Opt) (*Client, error) {
	c := cfg{topics: topics.Defaults(), now: time.Now}
	for _, o := range opts {
		o.apply(&c)
	}
	var errs []error
	bad := func(format string, args ...any) { errs = append(errs, fmt.Errorf("client: "+format, args...)) }
	switch {
	case c.kafka == nil && len(c.brokers) == 0:
		bad("no brokers: give Brokers or KafkaClient")
	case c.kafka != nil && len(c.brokers) > 0:
		bad("both Brokers and KafkaClient: the caller's client has its own brokers")
	case c.kafka != nil && c.security != nil:
		bad("both Security and KafkaClient: the caller's client has its own security settings")
	}
	for _, b := range c.brokers {
		if _, _, err := net.SplitHostPort(b); err != nil {
			bad("broker %q is not host:port", b)
		}
	}
	if c.security != nil {
		if c.security.CheckTimeout == 0 {
			c.security.CheckTimeout = kafkasec.DefaultCheckTimeout
		}
		if err := c.security.Validate(); err != nil {
			bad("security: %v", err)
		}
	}
	for _, t := range []topics.Topic{c.topics.Commands, c.topics.Changelog, c.topics.DLQ} {
		if err := t.Validate(); err != nil {
			errs = append(errs, fmt.Errorf("client: %w", err))
		}
	}
	if c.now == nil {
		bad("Clock: nil")
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}

	cl := &Client{cl: c.kafka, topics: c.topics, now: c.now}
	cl.mu.partitions = make(map[topics.Topic]int)
	if c.kafka != nil {
		cl.base = readerOpts(c.kafka)
		return cl, nil
	}
	base := []kgo.Opt{kgo.SeedBrokers(c.brokers...), kgo.ClientID("cohortgate-client")}
	if c.security != nil {
		sec, err := c.security.Opts()
		if err != nil {
			return nil, fmt.Errorf("client: security: %w", err)
		}
		base = append(base, sec...)
	}
	base = append(base, c.kgoOpts...)
	k, err := kgo.NewClient(append([]kgo.Opt{kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil))}, base...)...)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	cl.cl, cl.own, cl.base = k, true, readerOpts(k)
	return cl, nil
}

// readerOpts copies how cl connects — seed brokers, TLS or dialer, SASL,
// client id, logger — and nothing else: a reader made from them consumes
// only what it is told to, and shares no hooks with cl (a metrics plugin
// such as kprom is made for one client).
func readerOpts(cl *kgo.Client) []kgo.Opt {
	seeds, _ := cl.OptValue(kgo.SeedBrokers).([]string)
	opts := []kgo.Opt{kgo.SeedBrokers(seeds...)}
	if tc, _ := cl.OptValue(kgo.DialTLSConfig).(*tls.Config); tc != nil {
		opts = append(opts, kgo.DialTLSConfig(tc))
	} else if d, _ := cl.OptValue(kgo.Dialer).(func(context.Context, string, string) (net.Conn, error)); d != nil {
		opts = append(opts, kgo.Dialer(d))
	}
	if ms, _ := cl.OptValue(kgo.SASL).([]sasl.Mechanism); len(ms) > 0 {
		opts = append(opts, kgo.SASL(ms...))
	}
	if id, _ := cl.OptValue(kgo.ClientID).(string); id != "" {
		opts = append(opts, kgo.ClientID(id))
	}
	if l, _ := cl.OptValue(kgo.WithLogger).(kgo.Logger); l != nil {
		opts = append(opts, kgo.WithLogger(l))
	}
	return opts
}

// Close closes the client New built; a caller's client stays open.
func (c *Client) Close() {
	if c.own {
		c.cl.Close()
	}
}

// partitionOf returns the partition Kafka's default partitioner gives key
// in topic: murmur2 of the key, modulo the partition count. refresh asks
// the brokers for the count again instead of using the cached one.
func (c *Client) partitionOf(ctx context.Context, topic topics.Topic, key []byte, refresh bool) (int32, error) {
	c.mu.Lock()
	n := c.mu.partitions[topic]
	c.mu.Unlock()
	if n == 0 || refresh {
		td, err := kadm.NewClient(c.cl).ListTopics(ctx, string(topic))
		if err != nil {
			return 0, fmt.Errorf("unable to describe %s: %w", topic, err)
		}
		d, ok := td[string(topic)]
		switch {
		case !ok:
			return 0, fmt.Errorf("topic %s does not exist (the processor creates it at start)", topic)
		case d.Err != nil:
			return 0, fmt.Errorf("topic %s: %w", topic, d.Err)
		case len(d.Partitions) == 0:
			return 0, fmt.Errorf("topic %s has no partitions", topic)
		}
		n = len(d.Partitions)
		c.mu.Lock()
		c.mu.partitions[topic] = n
		c.mu.Unlock()
	}
	p := kgo.StickyKeyPartitioner(nil).ForTopic(string(topic)).Partition(&kgo.Record{Key: key}, n)
	return int32(p), nil
}

// reader returns a read_committed client of its own, made from the
// connection options, that consumes as opts say.
func (c *Client) reader(opts ...kgo.Opt) (*kgo.Client, error) {
	all := append(append([]kgo.Opt{}, c.base...), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	cl, err := kgo.NewClient(append(all, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("unable to make a reader: %w", err)
	}
	return cl, nil
}
