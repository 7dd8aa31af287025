package workload

import (
	"errors"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Clients are the Kafka clients Produce writes with. Close closes them.
type Clients struct {
	// Load writes the friendly load with Kafka's default partitioner
	// (franz-go's default, murmur2).
	Load *kgo.Client
	// Hostile writes the hostile mix's plain records to the partitions
	// they name, uncompressed (so that a large record is as large on the
	// wire as the README's limits say), in batches of up to 1 MiB. Nil
	// when there is no hostile mix.
	Hostile *kgo.Client
	// Txn is Hostile with a transactional ID, for the transactional
	// scenes. Nil when there is no hostile mix.
	Txn *kgo.Client
}

// hostileBatchBytes lets a record of Kafka's default max.message.bytes
// through the producer: franz-go's default batch limit (1000012) is
// below it.
const hostileBatchBytes = 1 << 20

// NewClients connects to brokers with opts added to each client. With
// hostile, it also makes the hostile mix's clients; txnID is then the
// transactional ID of its transactional producer, which must be unique
// to the run (two runs sharing one fence each other).
func NewClients(brokers []string, hostile bool, txnID string, opts ...kgo.Opt) (*Clients, error) {
	base := append([]kgo.Opt{kgo.SeedBrokers(brokers...)}, opts...)
	c := &Clients{}
	var err error
	if c.Load, err = kgo.NewClient(base...); err != nil {
		return nil, err
	}
	if !hostile {
		return c, nil
	}
	if txnID == "" {
		c.Close()
		return nil, errors.New("workload: the hostile mix needs a transactional ID")
	}
	h := append(append([]kgo.Opt(nil), base...),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.ProducerBatchMaxBytes(hostileBatchBytes),
	)
	if c.Hostile, err = kgo.NewClient(h...); err != nil {
		c.Close()
		return nil, err
	}
	if c.Txn, err = kgo.NewClient(append(h, kgo.TransactionalID(txnID))...); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// Close closes every client.
func (c *Clients) Close() {
	for _, cl := range []*kgo.Client{c.Load, c.Hostile, c.Txn} {
		if cl != nil {
			cl.Close()
		}
	}
}
