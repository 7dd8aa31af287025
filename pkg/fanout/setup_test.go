package fanout

import (
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestProducerDurability: every client the processor makes waits for all
// in-sync replicas and writes idempotently, what a replicated cluster
// with min.insync.replicas needs for no acknowledged record to be lost or
// doubled; the transactional session adds its ID on top.
func TestProducerDurability(t *testing.T) {
	cfg := &Config{Brokers: []string{"127.0.0.1:1"}, TransactionalID: "cohortgate-a"}
	for _, tc := range []struct {
		name string
		opts []kgo.Opt
	}{
		{"at least once", clientOpts(cfg, &limits{}, "cohortgate-signals")},
		{"exactly once", append(clientOpts(cfg, &limits{}, "cohortgate-signals"), kgo.TransactionalID(cfg.TransactionalID))},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl, err := kgo.NewClient(tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer cl.Close()
			if acks := cl.OptValue(kgo.RequiredAcks); acks != kgo.AllISRAcks() {
				t.Errorf("RequiredAcks = %v; want all in-sync replicas", acks)
			}
			if off := cl.OptValue(kgo.DisableIdempotentWrite); off != false {
				t.Errorf("DisableIdempotentWrite = %v; want idempotent writes", off)
			}
		})
	}
}
