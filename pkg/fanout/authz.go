package fanout

import (
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
)

// ErrNotAuthorized marks a broker's refusal of this principal on a topic,
// the group, the transactional ID or the cluster. A missing ACL does not
// heal by retrying, so the Processor halts with it instead of retrying
// forever while looking alive.
var ErrNotAuthorized = errors.New("fanout: not authorized")

// authzCodes are the Kafka errors that mean an ACL is missing.
var authzCodes = [...]*kerr.Error{
	kerr.TopicAuthorizationFailed,
	kerr.GroupAuthorizationFailed,
	kerr.TransactionalIDAuthorizationFailed,
	kerr.ClusterAuthorizationFailed,
}

// isAuthzFailure reports whether err is one of authzCodes.
func isAuthzFailure(err error) bool {
	for _, code := range authzCodes {
		if errors.Is(err, code) {
			return true
		}
	}
	return false
}

// notAuthorized returns err wrapped in ErrNotAuthorized when it is an
// authorization failure, naming where it happened; otherwise nil.
func notAuthorized(where string, err error) error {
	if !isAuthzFailure(err) {
		return nil
	}
	return fmt.Errorf(`%w: %s: %w; grant the principal the ACL it names (docs/operations.md, "Least privilege (ACLs)", lists them)`,
		ErrNotAuthorized, where, err)
}
