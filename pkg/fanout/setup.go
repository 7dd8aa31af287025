package fanout

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cohortgate/cohortgate/topics"
)

// kafka is the processor's view of the cluster, made once by connect: its
// clients other than the signals session's, what the topics look like,
// and their size limits.
type kafka struct {
	admCl *kgo.Client  // admin requests, and the aligner's listings (listEnds)
	adm   *kadm.Client // admCl's admin client
	cmds  *kgo.Client  // the commands consumer
	recov *kgo.Client  // the changelog reader of window recovery
	// readers are the changelog readers of window recovery and restores,
	// recov the first of them: Config.RestoreParallel (at most the
	// partition count), so that as many restores read side by side.
	readers     chan *readerClient
	readersMore []*kgo.Client // the readers other than recov
	// meta asks for the commands' partition count with each observation
	// (partitionCount). A client of its own: franz-go caches the answer
	// of every Metadata request, and a paused broker that still believes
	// it leads answers with its old leaders; cached in admCl, they would
	// send the aligner's listings to it.
	meta *kgo.Client
	// outputs are the outputs' topic IDs as found at start (topicids.go).
	outputs outputIDs

	signalPartitions    int32 // of both input topics
	changelogPartitions int32
	layout              layout // the topics as found at start
	lim                 *liveLimits
}

func (k *kafka) close() {
	k.meta.Close()
	for _, cl := range k.readersMore {
		cl.Close()
	}
	k.recov.Close()
	k.cmds.Close()
	k.adm.Close()
}

// connect makes the clients and checks the topics (creating them when
// allowed); lim is filled with their size limits as found at start
// before any producer reads it (the clients connect makes produce only
// to migrate commands; the signals session's producer follows the
// limits as they change, see liveLimits).
func connect(ctx context.Context, cfg *Config, lim *limits) (*kafka, error) {
	admCl, err := kgo.NewClient(clientOpts(cfg, lim, "cohortgate-admin")...)
	if err != nil {
		return nil, fmt.Errorf("unable to create admin client: %w", err)
	}
	k := &kafka{admCl: admCl, adm: kadm.NewClient(admCl)}
	details, err := ensureTopics(ctx, k.admCl, *cfg, cfg.Logger)
	if err != nil {
		k.adm.Close()
		return nil, err
	}
	k.layout = layoutOf(cfg.Topics, details)
	k.outputs = outputIDsOf(cfg.Topics, details)
	k.signalPartitions = k.layout.partitions()
	k.changelogPartitions = k.layout.Changelog.Partitions
	mono := func() int64 { return int64(cfg.Monotonic()) }
	readAt := mono()
	if *lim, err = readStartLimits(ctx, k.adm, cfg.Topics); err != nil {
		k.adm.Close()
		return nil, err
	}
	k.lim = newLiveLimits(*lim, readAt, mono, func(ctx context.Context) (limits, error) { return readLimits(ctx, k.adm, cfg.Topics) })
	consumer := func(id string) []kgo.Opt {
		return append(clientOpts(cfg, lim, id),
			kgo.FetchIsolationLevel(kgo.ReadCommitted()),
			kgo.KeepControlRecords(),
			kgo.ConsumeResetOffset(kgo.NoResetOffset()),
		)
	}
	if k.cmds, err = kgo.NewClient(consumer("cohortgate-commands")...); err != nil {
		k.adm.Close()
		return nil, fmt.Errorf("unable to create commands consumer: %w", err)
	}
	// They consume nothing until a recovery adds partitions.
	readers := max(1, min(cfg.RestoreParallel, int(k.signalPartitions)))
	k.readers = make(chan *readerClient, readers)
	for i := range readers {
		id := "cohortgate-recovery"
		if i > 0 {
			id = fmt.Sprintf("cohortgate-recovery-%d", i)
		}
		fetched := new(fetchedBytes)
		cl, err := kgo.NewClient(append(consumer(id), kgo.WithHooks(fetched))...)
		if err != nil {
			for _, cl := range k.readersMore {
				cl.Close()
			}
			if k.recov != nil {
				k.recov.Close()
			}
			k.cmds.Close()
			k.adm.Close()
			return nil, fmt.Errorf("unable to create changelog reader: %w", err)
		}
		if i == 0 {
			k.recov = cl
		} else {
			k.readersMore = append(k.readersMore, cl)
		}
		k.readers <- &readerClient{cl: cl, fetched: fetched}
	}
	if k.meta, err = kgo.NewClient(clientOpts(cfg, lim, "cohortgate-metadata")...); err != nil {
		for _, cl := range k.readersMore {
			cl.Close()
		}
		k.recov.Close()
		k.cmds.Close()
		k.adm.Close()
		return nil, fmt.Errorf("unable to create metadata client: %w", err)
	}
	return k, nil
}

// layoutOf is the layout of the topics of set as details describe them.
func layoutOf(set topics.Set, details kadm.TopicDetails) layout {
	shape := func(t topics.Topic) topicShape {
		d := details[string(t)]
		return topicShape{Name: string(t), ID: d.ID.String(), Partitions: int32(len(d.Partitions))}
	}
	l := layout{Commands: shape(set.Commands), Changelog: shape(set.Changelog)}
	for _, in := range set.Inputs() {
		l.Inputs = append(l.Inputs, shape(in))
	}
	return l
}

// clientOpts are the options of every client the processor makes. lim is
// read when a producer first meets a topic, by then filled by connect.
func clientOpts(cfg *Config, lim *limits, id string) []kgo.Opt {
	return append([]kgo.Opt{
		kgo.SeedBrokers(cfg.Brokers...),
		kgo.ClientID(id),
		kgo.RecordPartitioner(newPartitioner()),
		// A write counts once every in-sync replica has it, and the
		// topic's min.insync.replicas (2 of 3 in production) bounds how
		// few that may be; idempotence (never disabled here) keeps a
		// retry from writing twice. Transactions need both. These are
		// franz-go's defaults, stated so that they hold for the
		// at-least-once producer too and no default can change them unseen.
		kgo.RequiredAcks(kgo.AllISRAcks()),
		// What a topic takes, the producer takes: a record the broker would
		// accept is never refused by the client, and one it would refuse
		// is caught before producing (see limits).
		kgo.ProducerBatchMaxBytesFn(func(topic string) int32 {
			return int32(min(max(lim.of(topic), 512), maxProducerBatchBytes))
		}),
		kgo.BrokerMaxWriteBytes(maxProducerBatchBytes + 1<<20),
		// How soon a client may ask for metadata again. A produce or
		// fetch that fails retriably (its leader moved: a broker
		// killed, stopped or paused) is retried after the next metadata
		// update, which franz-go's default (5s) puts 5s after the last:
		// under broker faults a transaction's flush took 5, 10 or 15s,
		// in steps of 5s, each step past the moment a new look would
		// have found the leader.
		kgo.MetadataMinAge(metadataMinAge),
	}, cfg.KafkaOpts...)
}

// metadataMinAge is the least time between two metadata requests of one
// client: Kafka's own clients retry a failed request after
// retry.backoff.ms (100ms), with metadata refreshed first.
const metadataMinAge = 250 * time.Millisecond

// maxProducerBatchBytes caps the producer's batches whatever a topic
// allows.
const maxProducerBatchBytes = 64 << 20

// readLimits reads the max.message.bytes of every topic of set. A topic
// whose setting is not reported keeps Kafka's default.
func readLimits(ctx context.Context, adm *kadm.Client, set topics.Set) (limits, error) {
	l := limits{byTopic: make(map[string]int)}
	var names []string
	for _, s := range set.Specs() {
		names = append(names, string(s.Topic))
	}
	rcs, err := adm.DescribeTopicConfigs(ctx, names...)
	if fatal := notAuthorized("reading the topics' max.message.bytes (DescribeConfigs on "+strings.Join(names, ", ")+")", err); fatal != nil {
		return l, fatal
	}
	if err != nil {
		return l, fmt.Errorf("unable to read the topics' max.message.bytes: %w", err)
	}
	for _, rc := range rcs {
		if fatal := notAuthorized("reading the configs of topic "+rc.Name+" (DescribeConfigs)", rc.Err); fatal != nil {
			return l, fatal
		}
		if rc.Err != nil {
			return l, fmt.Errorf("unable to read the configs of topic %s: %w", rc.Name, rc.Err)
		}
		for _, c := range rc.Configs {
			if c.Key != "max.message.bytes" || c.Value == nil {
				continue
			}
			n, err := strconv.Atoi(*c.Value)
			if err != nil || n < 1 {
				return l, fmt.Errorf("topic %s: max.message.bytes %q is not a positive integer", rc.Name, *c.Value)
			}
			l.byTopic[rc.Name] = n
		}
	}
	return l, nil
}

// startLimitsWait bounds how long a start waits for the topics' limits to
// be readable: on a cluster, a topic just created (by this start, or by
// another instance's) is not known to every broker at once, and one that
// does not know it yet answers UNKNOWN_TOPIC_OR_PARTITION, a retriable
// error. Past the bound, the error is the start's.
const startLimitsWait = 30 * time.Second

// readStartLimits is readLimits, asked again after a retriable error,
// every 100 ms to 1 s, for at most startLimitsWait.
func readStartLimits(ctx context.Context, adm *kadm.Client, set topics.Set) (limits, error) {
	ctx, cancel := context.WithTimeout(ctx, startLimitsWait)
	defer cancel()
	backoff := 100 * time.Millisecond
	for {
		l, err := readLimits(ctx, adm, set)
		if err == nil || !kerr.IsRetriable(err) {
			return l, err
		}
		t := time.NewTimer(backoff)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return l, err
		}
		backoff = min(2*backoff, time.Second)
	}
}

// ensureTopics creates the missing topics when allowed and checks that the
// input topics are co-partitioned. It returns every topic's details.
func ensureTopics(ctx context.Context, cl *kgo.Client, cfg Config, log interface {
	Info(string, ...any)
}) (kadm.TopicDetails, error) {
	specs := cfg.Topics.Specs()
	names := make([]string, len(specs))
	for i, s := range specs {
		names[i] = string(s.Topic)
	}
	details, err := listTopics(ctx, cl, names)
	if err != nil {
		return nil, err
	}
	var missing []topics.Spec
	for _, s := range specs {
		if _, ok := details[string(s.Topic)]; !ok {
			missing = append(missing, s)
		}
	}
	if len(missing) > 0 {
		if !cfg.CreateTopics {
			var ms []string
			for _, s := range missing {
				ms = append(ms, string(s.Topic))
			}
			return nil, &MissingTopicsError{Topics: ms}
		}
		if err := createTopics(ctx, kadm.NewClient(cl), cfg, details, missing, log); err != nil {
			return nil, err
		}
		if details, err = waitTopics(ctx, cl, names); err != nil {
			return nil, err
		}
	}
	if err := coPartitioned(cfg.Topics, details); err != nil {
		return nil, err
	}
	return details, nil
}

// coPartitioned returns a *PartitionMismatchError when an input of set
// has another partition count than the commands, as details describe
// them, and nil otherwise.
func coPartitioned(set topics.Set, details kadm.TopicDetails) error {
	nc := len(details[string(set.Commands)].Partitions)
	mismatch := &PartitionMismatchError{Commands: set.Commands, CommandPartitions: nc}
	for _, in := range set.Inputs() {
		if n := len(details[string(in)].Partitions); n != nc {
			mismatch.Inputs = append(mismatch.Inputs, TopicPartitions{Topic: in, Partitions: n})
		}
	}
	if len(mismatch.Inputs) > 0 {
		return mismatch
	}
	return nil
}

// listTopics returns the existing topics among names; a name that does not
// exist is absent from the result. Authorization and transport failures
// are errors.
//
// It asks the broker every time. kadm's ListTopics answers from the
// client's metadata cache, which keeps what it saw, absences included, for
// kgo.MetadataMinAge (5s by default): after creating the topics, the
// start waited that long to see them: 5 of the 7 s to ready at 10M
// members, on every start on a new cluster (TestEnsureTopicsSeesWhatItCreated).
func listTopics(ctx context.Context, cl *kgo.Client, names []string) (kadm.TopicDetails, error) {
	req := kmsg.NewPtrMetadataRequest()
	for _, name := range names {
		rt := kmsg.NewMetadataRequestTopic()
		rt.Topic = kmsg.StringPtr(name)
		req.Topics = append(req.Topics, rt)
	}
	resp, err := req.RequestWith(ctx, cl) // the client hands metadata requests to the broker, uncached
	if err != nil {
		return nil, fmt.Errorf("unable to list topics: %w", err)
	}
	out := make(kadm.TopicDetails)
	for _, t := range resp.Topics {
		if t.Topic == nil {
			continue
		}
		name := *t.Topic
		err := kerr.ErrorForCode(t.ErrorCode)
		switch {
		case errors.Is(err, kerr.UnknownTopicOrPartition):
		case err != nil:
			return nil, fmt.Errorf("unable to describe topic %s: %w", name, err)
		case len(t.Partitions) > 0:
			d := kadm.TopicDetail{Topic: name, ID: t.TopicID, IsInternal: t.IsInternal, Partitions: make(kadm.PartitionDetails, len(t.Partitions))}
			for _, p := range t.Partitions {
				d.Partitions[p.Partition] = kadm.PartitionDetail{Topic: name, Partition: p.Partition, Leader: p.Leader,
					LeaderEpoch: p.LeaderEpoch, Replicas: p.Replicas, ISR: p.ISR, OfflineReplicas: p.OfflineReplicas,
					Err: kerr.ErrorForCode(p.ErrorCode)}
			}
			out[name] = d
		}
	}
	return out, nil
}

// createTopics creates the missing topics. An input topic (the commands or a
// route's input) created beside an existing one takes its partition count
// (the commands' when they exist), so they stay co-partitioned.
func createTopics(ctx context.Context, adm *kadm.Client, cfg Config, existing kadm.TopicDetails, missing []topics.Spec, log interface {
	Info(string, ...any)
}) error {
	inputs := cfg.Partitions
	for _, t := range append(cfg.Topics.Inputs(), cfg.Topics.Commands) {
		if d, ok := existing[string(t)]; ok {
			inputs = int32(len(d.Partitions))
		}
	}
	for _, s := range missing {
		parts := cfg.Partitions
		if s.SamePartitionsAsSignals {
			parts = inputs
		}
		configs := make(map[string]*string, len(s.Configs))
		for k, v := range s.Configs {
			configs[k] = kadm.StringPtr(v)
		}
		resp, err := adm.CreateTopic(ctx, parts, cfg.ReplicationFactor, configs, string(s.Topic))
		switch {
		case errors.Is(err, kerr.TopicAlreadyExists):
			// Another instance won the race; the check below compares counts.
		case err != nil:
			msg := resp.ErrMessage
			if msg != "" {
				msg = " (" + msg + ")"
			}
			return fmt.Errorf("unable to create topic %s (%s)%s: %w", s.Topic, s.Role, msg, err)
		default:
			log.Info("created topic", "topic", string(s.Topic), "role", s.Role, "partitions", parts)
		}
	}
	return nil
}

// waitTopics waits, bounded, until every name is visible with partitions:
// creation is acknowledged before metadata propagates.
func waitTopics(ctx context.Context, cl *kgo.Client, names []string) (kadm.TopicDetails, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	for {
		details, err := listTopics(ctx, cl, names)
		if err == nil && len(details) == len(names) {
			return details, nil
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("topics created but not visible after 30s: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
