package kafkasec

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// CheckTransactional asks the transaction coordinator for a producer ID
// under txnID, within c.CheckTimeout, and returns an error naming the
// missing ACL when the principal may not use txnID (Write and Describe on
// the transactional ID). franz-go retries a refused producer ID forever in
// the background, so without this check a missing ACL looks like a hang.
//
// Any other answer, including a retriable error, returns nil: the
// processor's own session handles those. The request bumps txnID's epoch,
// as the session's first transaction would; call it only for an instance
// about to start with txnID.
func (c *Config) CheckTransactional(ctx context.Context, brokers []string, txnID string) error {
	timeout := c.checkTimeout()
	opts, err := c.Opts()
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(append(checkClientOpts(brokers, timeout), opts...)...)
	if err != nil {
		return fmt.Errorf("unable to check the transactional ID: %w", err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()

	req := kmsg.NewPtrInitProducerIDRequest()
	req.TransactionalID = &txnID
	req.TransactionTimeoutMillis = int32((time.Minute).Milliseconds())
	req.ProducerID, req.ProducerEpoch = -1, -1
	resp, err := req.RequestWith(ctx, cl)
	if err == nil {
		err = kerr.ErrorForCode(resp.ErrorCode)
	}
	for _, code := range []*kerr.Error{kerr.TransactionalIDAuthorizationFailed, kerr.ClusterAuthorizationFailed} {
		if errors.Is(err, code) {
			return fmt.Errorf("not authorized to use transactional ID %q (%w): grant its principal Write and Describe on the transactional ID (a prefixed ACL on --transactional-id's prefix), or run with --exactly-once=false",
				txnID, err)
		}
	}
	return nil
}
