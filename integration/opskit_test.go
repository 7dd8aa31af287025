package integration

import (
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"go.yaml.in/yaml/v3"

	"github.com/cohortgate/cohortgate/topics"
)

// metricName matches the project's own metric names in PromQL.
var metricName = regexp.MustCompile(`\bcohortgate_[a-z0-9_]+\b`)

// opsKitExprs returns the PromQL of every alert rule in
// deploy/prometheus/alerts.yml and every panel target of
// deploy/grafana/cohortgate.json, each prefixed by where it is.
func opsKitExprs(t *testing.T) []string {
	t.Helper()
	raw, err := os.ReadFile("../deploy/prometheus/alerts.yml")
	if err != nil {
		t.Fatal(err)
	}
	var rules struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Expr        string            `yaml:"expr"`
				For         string            `yaml:"for"`
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	dec := yaml.NewDecoder(strings.NewReader(string(raw)))
	dec.KnownFields(true)
	if err := dec.Decode(&rules); err != nil {
		t.Fatalf("alerts.yml: %v", err)
	}
	var exprs []string
	alerts := make(map[string]bool)
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || strings.TrimSpace(r.Expr) == "" || r.Annotations["summary"] == "" {
				t.Errorf("alerts.yml group %s: rule %q needs alert, expr and a summary", g.Name, r.Alert)
			}
			if r.For != "" {
				if _, err := time.ParseDuration(r.For); err != nil {
					t.Errorf("alerts.yml %s: for %q: %v", r.Alert, r.For, err)
				}
			}
			alerts[r.Alert] = true
			exprs = append(exprs, "alert "+r.Alert+": "+r.Expr+" "+r.Annotations["description"])
		}
	}
	for _, want := range []string{"CohortgateNotReady", "CohortgateConsumerLagGrowing", "CohortgateDLQRate",
		"CohortgateLateLeaves", "CohortgateTransactionAborts", "CohortgateStalled"} {
		if !alerts[want] {
			t.Errorf("alerts.yml has no %s", want)
		}
	}

	raw, err = os.ReadFile("../deploy/grafana/cohortgate.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Title  string `json:"title"`
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatalf("cohortgate.json: %v", err)
	}
	if len(dash.Panels) == 0 {
		t.Fatal("cohortgate.json has no panels")
	}
	for _, p := range dash.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("cohortgate.json panel %q has no targets", p.Title)
		}
		for _, tg := range p.Targets {
			exprs = append(exprs, "panel "+p.Title+": "+tg.Expr)
		}
	}
	return exprs
}

// TestOpsKitMetricsExist checks that every metric the alert rules and the
// dashboard reference is served by a running processor, driven until each
// labelled family has a series: a signal, a leave, a bad command (DLQ) and
// a misrouted signal.
func TestOpsKitMetricsExist(t *testing.T) {
	exprs := opsKitExprs(t)
	e := newEnv(t, 2)
	b := e.runBinary(t.TempDir())
	b.waitReady(t)

	// A user whose key murmur2 places on partition 1, sent to partition 0.
	var misrouted uint64
	for u := uint64(1); u < 1000; u++ {
		if murmur2Partition(topics.AppendUserID(nil, u), 2) == 1 {
			misrouted = u
			break
		}
	}
	manual, err := kgo.NewClient(kgo.SeedBrokers(broker.addrs...), kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		t.Fatal(err)
	}
	defer manual.Close()
	now := time.Now()
	rs := []*kgo.Record{
		{Topic: string(e.set.Signals), Partition: 0, Key: topics.AppendUserID(nil, misrouted), Value: []byte("misrouted"), Timestamp: now},
		{Topic: string(e.set.Commands), Partition: 0, Key: []byte("not-a-user"), Value: []byte("{"), Timestamp: now},
	}
	ctx := e.ctx(30 * time.Second)
	if err := manual.ProduceSync(ctx, rs...).FirstErr(); err != nil {
		t.Fatal(err)
	}
	if err := e.cl.ProduceSync(ctx,
		&kgo.Record{Topic: string(e.set.Commands), Key: topics.AppendUserID(nil, 5),
			Value: topics.AppendCommand(nil, topics.Command{Op: topics.Leave, UserID: 5}), Timestamp: now},
		&kgo.Record{Topic: string(e.set.Signals), Key: topics.AppendUserID(nil, 6), Value: []byte("s"), Timestamp: now},
	).FirstErr(); err != nil {
		t.Fatal(err)
	}

	var names []string
	for _, x := range exprs {
		names = append(names, metricName.FindAllString(x, -1)...)
	}
	slices.Sort(names)
	names = slices.Compact(names)
	eventually(t, 60*time.Second, func() error {
		served := b.metrics(t)
		var missing []string
		for _, n := range names {
			if served[n] != nil && len(served[n].values) > 0 {
				continue
			}
			base := strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(n, "_bucket"), "_sum"), "_count")
			if base != n && served[base] != nil {
				continue // a histogram's series
			}
			missing = append(missing, n)
		}
		if len(missing) > 0 {
			return fmt.Errorf("referenced by deploy/ but not served: %s", strings.Join(missing, ", "))
		}
		return nil
	})
	// No label may carry a user id: a user's privacy choice must not leak
	// into the monitoring system, and per-user series would not scale.
	for name, d := range b.metrics(t) {
		for labels := range d.values {
			for _, kv := range strings.Split(labels, ",") {
				if k, _, _ := strings.Cut(kv, "="); strings.Contains(strings.ToLower(k), "user") {
					t.Errorf("%s has a label %q", name, k)
				}
			}
		}
	}
}
