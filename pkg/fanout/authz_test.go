package fanout

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
)

func TestNotAuthorized(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"topic", kerr.TopicAuthorizationFailed, true},
		{"group", kerr.GroupAuthorizationFailed, true},
		{"transactional id", kerr.TransactionalIDAuthorizationFailed, true},
		{"cluster", kerr.ClusterAuthorizationFailed, true},
		{"wrapped", fmt.Errorf("produce: %w", kerr.TopicAuthorizationFailed), true},
		{"retriable", kerr.NotLeaderForPartition, false},
		{"sasl", kerr.SaslAuthenticationFailed, false},
		{"canceled", context.Canceled, false},
		{"nil", nil, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := notAuthorized("fetch of t[0]", tc.err)
			if (got != nil) != tc.want {
				t.Fatalf("notAuthorized(%v) = %v, want an error: %v", tc.err, got, tc.want)
			}
			if got != nil && (!errors.Is(got, ErrNotAuthorized) || !errors.Is(got, tc.err)) {
				t.Fatalf("%v does not wrap both ErrNotAuthorized and %v", got, tc.err)
			}
		})
	}
}
