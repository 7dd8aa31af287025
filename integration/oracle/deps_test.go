package oracle

import (
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestSharesNoCode fails if the oracle, its tests included, depends on any
// package of cohortgate but itself: the processor's model, gate, pipeline
// or record decoders (pkg/membership, pkg/gate, pkg/fanout, topics), or
// anything that might lead to them (integration/workload imports topics).
// A bug the oracle shared with the processor would pass unseen.
func TestSharesNoCode(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "go", "list", "-deps", "-test", "-f", "{{.ImportPath}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	const self = "github.com/cohortgate/cohortgate/integration/oracle"
	deps := strings.Fields(string(out))
	if len(deps) < 10 || !strings.Contains(string(out), "github.com/twmb/franz-go/pkg/kgo") {
		t.Fatalf("go list printed %d packages, without franz-go: not the dependency list\n%s", len(deps), out)
	}
	for _, d := range deps {
		switch {
		case !strings.HasPrefix(d, "github.com/cohortgate/cohortgate"):
		case d == self, d == self+"_test", d == self+".test": // itself, its example tests, its test binary
		default:
			t.Errorf("the oracle depends on %s", d)
		}
	}
}
