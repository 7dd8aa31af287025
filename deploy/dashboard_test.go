package deploy

import (
	"encoding/json"
	"os"
	"regexp"
	"strings"
	"testing"
)

// unitOf is the unit a panel target plots, from the PromQL alone: a
// quantile of a _seconds histogram is seconds, a rate is per second, a
// gauge named _bytes is bytes, _seconds seconds, and anything else a
// count.
func unitOf(expr string) string {
	switch {
	case strings.HasPrefix(expr, "histogram_quantile(") && strings.Contains(expr, "_seconds_bucket"):
		return "s"
	case strings.Contains(expr, "rate("):
		return "ops"
	}
	name := regexp.MustCompile(`cohortgate_[a-z0-9_]+`).FindString(expr)
	switch {
	case strings.HasSuffix(name, "_bytes"):
		return "bytes"
	case strings.HasSuffix(name, "_seconds"):
		return "s"
	}
	return "short"
}

// TestDashboard: every panel plots one unit, the one its axis says, and
// every query is scoped by the dashboard's job and instance variables.
func TestDashboard(t *testing.T) {
	raw, err := os.ReadFile("grafana/cohortgate.json")
	if err != nil {
		t.Fatal(err)
	}
	var dash struct {
		Templating struct {
			List []struct {
				Name string `json:"name"`
				Type string `json:"type"`
			} `json:"list"`
		} `json:"templating"`
		Panels []struct {
			Title       string `json:"title"`
			FieldConfig struct {
				Defaults struct {
					Unit string `json:"unit"`
				} `json:"defaults"`
				Overrides []any `json:"overrides"`
			} `json:"fieldConfig"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	if err := json.Unmarshal(raw, &dash); err != nil {
		t.Fatal(err)
	}
	vars := make(map[string]string)
	for _, v := range dash.Templating.List {
		vars[v.Name] = v.Type
	}
	for _, name := range []string{"job", "instance"} {
		if vars[name] != "query" {
			t.Errorf("no %s variable (a query) in %v", name, vars)
		}
	}
	selector := regexp.MustCompile(`cohortgate_[a-z0-9_]+(\{[^}]*\})?`)
	for _, p := range dash.Panels {
		if len(p.FieldConfig.Overrides) > 0 {
			t.Errorf("panel %q: overrides may put a second unit on an axis", p.Title)
		}
		for _, tg := range p.Targets {
			if u := unitOf(tg.Expr); u != p.FieldConfig.Defaults.Unit {
				t.Errorf("panel %q (unit %s) plots %s in %s", p.Title, p.FieldConfig.Defaults.Unit, u, tg.Expr)
			}
			for _, m := range selector.FindAllStringSubmatch(tg.Expr, -1) {
				if !strings.Contains(m[1], `job=~"$job"`) || !strings.Contains(m[1], `instance=~"$instance"`) {
					t.Errorf("panel %q: %s is not scoped by $job and $instance", p.Title, m[0])
				}
			}
		}
	}
}
