package client

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
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

	unclaimed     int
	scans         *scans // the receipts the watcher cannot serve
	statusReaders *readerPool
	hooks         []Hook
	kafkaHooks    func(clientID string) []kgo.Hook
	clientID      string
	readers       atomic.Uint64 // readers made, to name each

	mu struct {
		sync.Mutex
		// partitions caches each topic's partition count, to compute a
		// key's partition; refreshed when a record lands elsewhere.
		partitions map[topics.Topic]int
		// byKey places a key as Kafka's default partitioner does. Made
		// once: making one seeds a random source (for keyless records),
		// which cost half a bulk publish's CPU when made per command.
		byKey   kgo.TopicPartitioner
		watcher *watcher // started by the first receipt waited for
		closed  bool
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

	unclaimed  int
	scans      int
	hooks      []Hook
	kafkaHooks func(clientID string) []kgo.Hook
}

// Hook is a callback of the client's own events, for the caller's
// metrics: a value implementing any of [HookPublished] and
// [HookReceipt]. Hooks are called synchronously, from the goroutine that
// saw the event (franz-go's for asynchronous publishes, the receipt
// watcher's for receipts): they must not block.
type Hook any

// HookPublished is called once per command published, with Kafka's
// answer: err nil once acknowledged (a [*MisroutedError] counts as
// acknowledged elsewhere), and took from the publish call to that answer.
type HookPublished interface {
	OnPublished(p Published, err error, took time.Duration)
}

// HookReceipt is called once per receipt waited for, with the answer:
// err nil for a changelog record, a [*RefusedError] for a refusal, or
// why there is none (the caller's context ended, the client closed).
// waited runs from the start of the wait to the answer.
type HookReceipt interface {
	OnReceipt(p Published, err error, waited time.Duration)
}

// Hooks adds hooks of the client's own events ([HookPublished],
// [HookReceipt]); a value implementing neither is refused. The client
// keeps no metrics registry of its own: count with these.
func Hooks(hs ...Hook) Opt {
	return opt(func(c *cfg) { c.hooks = append(c.hooks, hs...) })
}

// KafkaHooks gives franz-go hooks (a kprom.Metrics, say) to every Kafka
// client the Client makes: the producer New builds, the receipt watcher,
// the readers [Client.Status] keeps and the reader each scanning
// [Client.WaitReceipt] makes. hooks is called once per client, before it
// is made, with the client id it will have — the base id (KafkaOpts'
// kgo.ClientID, or "cohortgate-client"), "-receipts" for the watcher,
// "-status-N" for Status's N-th reader and "-read-N" for the N-th scan's
// reader — and returns that client's hooks: a plugin such as kprom,
// made for one client, gets one instance each (kprom.WithClientLabel
// tells them apart; a closed client's collectors are unregistered). A
// caller's [KafkaClient] keeps its own hooks; its readers get these.
func KafkaHooks(hooks func(clientID string) []kgo.Hook) Opt {
	return opt(func(c *cfg) { c.kafkaHooks = hooks })
}

// Unclaimed bounds how many of the answers it read the receipt watcher
// keeps for waits that come later (default [DefaultUnclaimed]; each costs
// its changelog record's value, a few hundred bytes, and about 50 more,
// and the record decoded, about 1 kB, until a wait claims it): a wait for
// a command whose answer was forgotten is served by a scan of the
// changelog of its own, slower but as exact.
func Unclaimed(n int) Opt {
	return opt(func(c *cfg) { c.unclaimed = n })
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
	c := cfg{topics: topics.Defaults(), now: time.Now, unclaimed: DefaultUnclaimed, scans: DefaultScans}
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
	if c.unclaimed < 1 {
		bad("Unclaimed: %d, want at least 1", c.unclaimed)
	}
	if c.scans < 1 {
		bad("Scans: %d, want at least 1", c.scans)
	}
	for i, h := range c.hooks {
		_, pub := h.(HookPublished)
		_, rec := h.(HookReceipt)
		if !pub && !rec {
			bad("Hooks: hook %d (%T) implements neither HookPublished nor HookReceipt", i, h)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}

	cl := &Client{cl: c.kafka, topics: c.topics, now: c.now, unclaimed: c.unclaimed, hooks: c.hooks, kafkaHooks: c.kafkaHooks}
	cl.scans = newScans(cl, c.scans)
	cl.statusReaders = newReaderPool(cl, c.scans)
	cl.mu.partitions = make(map[topics.Topic]int)
	cl.mu.byKey = kgo.StickyKeyPartitioner(nil).ForTopic("")
	if c.kafka != nil {
		cl.base, cl.clientID = readerOpts(c.kafka)
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
	if c.kafkaHooks != nil {
		id := "cohortgate-client"
		if probe, err := kgo.NewClient(base...); err == nil { // the id KafkaOpts may have set; makes no connection
			id, _ = probe.OptValue(kgo.ClientID).(string)
			probe.Close()
		}
		base = append(base, kgo.WithHooks(c.kafkaHooks(id)...))
	}
	k, err := kgo.NewClient(append([]kgo.Opt{kgo.RecordPartitioner(kgo.StickyKeyPartitioner(nil))}, base...)...)
	if err != nil {
		return nil, fmt.Errorf("client: %w", err)
	}
	cl.cl, cl.own = k, true
	cl.base, cl.clientID = readerOpts(k)
	return cl, nil
}

// readerOpts copies how cl connects — seed brokers, TLS or dialer, SASL,
// logger — and nothing else, and returns its client id: a reader made
// from them consumes only what it is told to, and shares no hooks with cl
// (a metrics plugin such as kprom is made for one client: readers get
// their own from [KafkaHooks]).
func readerOpts(cl *kgo.Client) ([]kgo.Opt, string) {
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
	id, _ := cl.OptValue(kgo.ClientID).(string)
	if l, _ := cl.OptValue(kgo.WithLogger).(kgo.Logger); l != nil {
		opts = append(opts, kgo.WithLogger(l))
	}
	return opts, id
}

// Close stops the receipt watcher and the scans, failing the waits still
// open, closes the readers [Client.Status] keeps, and closes the client
// New built; a caller's client stays open. Publishes
// and waits after Close fail.
func (c *Client) Close() {
	c.mu.Lock()
	w := c.mu.watcher
	c.mu.closed = true
	c.mu.Unlock()
	if w != nil {
		w.close()
	}
	c.scans.close()
	c.statusReaders.close()
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
	c.mu.Lock()
	p := c.mu.byKey.Partition(&kgo.Record{Key: key}, n) // a key's partition depends on the key and n alone
	c.mu.Unlock()
	return int32(p), nil
}

// reader returns a read_committed client of its own, made from the
// connection options, that consumes as opts say. role names it: its
// client id is the base id and "-"+role, or "-read-N" when role is "".
func (c *Client) reader(role string, opts ...kgo.Opt) (*kgo.Client, error) {
	if role == "" {
		role = "read-" + strconv.FormatUint(c.readers.Add(1), 10)
	}
	id := c.clientID
	if id == "" {
		id = "cohortgate-client"
	}
	id += "-" + role
	all := append(append([]kgo.Opt{}, c.base...), kgo.ClientID(id), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	if c.kafkaHooks != nil {
		all = append(all, kgo.WithHooks(c.kafkaHooks(id)...))
	}
	cl, err := kgo.NewClient(append(all, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("unable to make a reader: %w", err)
	}
	return cl, nil
}
