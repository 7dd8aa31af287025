package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/cohortgate/cohortgate/integration/oracle"
	"github.com/cohortgate/cohortgate/integration/workload"
)

// TestVerdict: a scenario passes only without damage; a control only with
// the damage its name promises, whatever else it shows; an informational
// control always.
func TestVerdict(t *testing.T) {
	find := func(name string) scenario {
		sc, ok := findScenario(name)
		if !ok {
			t.Fatalf("no scenario %s", name)
		}
		return sc
	}
	for _, tc := range []struct {
		name string
		r    result
		pass bool
		word string // in the verdict
	}{
		{"clean", result{sc: find("kill")}, true, "ok"},
		{"a leak", result{sc: find("kill"), rep: oracle.Report{Leaked: 1}}, false, "1 leaked"},
		{"a missing window", result{sc: find("wipe"), rep: oracle.Report{MissingWindows: 2}}, false, "2 missing windows"},
		{"late signals are allowed", result{sc: find("kill"), rep: oracle.Report{Late: 5, ConservativeWindows: 1}}, true, "ok"},
		{"a finding", result{sc: find("scale"), findings: []string{"x"}}, false, "misbehaved"},
		{"an error", result{sc: find("kill"), err: errors.New("boom")}, false, "boom"},
		{"control-no-txn with duplicates", result{sc: find("control-no-txn"), rep: oracle.Report{Duplicates: 3}}, true, "control ok"},
		{"control-no-txn with only a leak", result{sc: find("control-no-txn"), rep: oracle.Report{Leaked: 3}}, false, "did not show"},
		{"control-lso leaks", result{sc: find("control-lso"), rep: oracle.Report{Leaked: 4, Late: 2}}, true, "control ok"},
		{"control-lso only late", result{sc: find("control-lso"), rep: oracle.Report{Late: 4}}, false, "did not show"},
		{"control-no-window-recovery", result{sc: find("control-no-window-recovery"), rep: oracle.Report{MissingWindows: 1, Leaked: 3}}, true, "control ok"},
		{"control-no-window-recovery, leaks only", result{sc: find("control-no-window-recovery"), rep: oracle.Report{Leaked: 3}}, false, "did not show"},
		{"control-skip-commands", result{sc: find("control-skip-commands"), rep: oracle.Report{Leaked: 1}}, true, "control ok"},
		{"repartition with a hint of where to look", result{sc: find("repartition"), rep: oracle.Report{Leaked: 2}, known: "where repartition found leaks before: x"},
			false, "2 leaked; where repartition found leaks before: x"},
		{"recreate with a lost signal", result{sc: find("recreate"), rep: oracle.Report{Lost: 1}}, false, "1 lost"},
		{"control-ignore-topology leaks", result{sc: find("control-ignore-topology"), rep: oracle.Report{Leaked: 7}}, true, "control ok"},
		{"control-ignore-topology, duplicates only", result{sc: find("control-ignore-topology"), rep: oracle.Report{Duplicates: 1}}, false, "did not show"},
		{"control-no-sync without damage", result{sc: find("control-no-sync")}, true, "as explained"},
		{"control-no-sync with damage", result{sc: find("control-no-sync"), rep: oracle.Report{Lost: 1}}, true, "informational"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pass, why := tc.r.verdict()
			if pass != tc.pass || !strings.Contains(why, tc.word) {
				t.Fatalf("verdict = %v, %q; want %v and %q", pass, why, tc.pass, tc.word)
			}
		})
	}
}

// TestScenarios checks the table of scenarios: every control names the
// damage it shows, and the two controls of the hostile mix (control-lso,
// control-no-window-recovery) run the processors with their unsafe flag
// and only the scenes that provoke the damage.
func TestScenarios(t *testing.T) {
	o := &options{hostile: workload.Hostile{Scenes: 16, Grace: 200 * time.Millisecond}}
	for _, sc := range allScenarios() {
		if sc.control != "" && !sc.informational && sc.shows == nil {
			t.Errorf("%s: a control without the damage it shows", sc.name)
		}
		if sc.span == nil || sc.act == nil || sc.instances < 1 {
			t.Errorf("%s: incomplete", sc.name)
		}
	}
	for name, want := range map[string]struct {
		flag string
		kind workload.Kind
	}{
		"control-lso":                {"--unsafe-observe-lso", workload.KindTxnHeld},
		"control-no-window-recovery": {"--unsafe-no-window-recovery", workload.KindLateLeave},
	} {
		sc, ok := findScenario(name)
		if !ok {
			t.Fatalf("no scenario %s", name)
		}
		h := sc.mix(o.hostile)
		if !slices.Contains(sc.flags, want.flag) || h.Scenes < 1 || h.Shares.String() != string(want.kind)+"=1" || h.Grace != o.hostile.Grace {
			t.Errorf("%s: flags %v, mix %+v; want %s and only %s scenes", name, sc.flags, h, want.flag, want.kind)
		}
	}
}

// TestGrowingScenarios: repartition and its control grow the topics (the
// load's producers refresh their metadata, the hostile mix routes by the
// harness's counts); only the control runs with --unsafe-ignore-topology.
func TestGrowingScenarios(t *testing.T) {
	for name, unsafe := range map[string]bool{"repartition": false, "control-ignore-topology": true} {
		sc, ok := findScenario(name)
		if !ok {
			t.Fatalf("no scenario %s", name)
		}
		if !sc.grows || slices.Contains(sc.flags, "--unsafe-ignore-topology") != unsafe || (sc.control != "") != unsafe {
			t.Errorf("%s: grows %v, flags %v, control %q", name, sc.grows, sc.flags, sc.control)
		}
	}
	if sc, _ := findScenario("recreate"); sc.grows || sc.control != "" || len(sc.flags) > 0 || sc.instances < 2 {
		t.Errorf("recreate: %+v", sc)
	}
	t0 := time.Date(2026, 12, 6, 20, 0, 0, 0, time.UTC)
	hint := growthHint(t0, t0.Add(1500*time.Millisecond), 200*time.Millisecond)
	if !strings.Contains(hint, "20:00:00.000") || !strings.Contains(hint, "20:00:01.500") || !strings.Contains(hint, "a partition beyond") {
		t.Errorf("growthHint = %q", hint)
	}
	if n := grownPartitions(&options{partitions: 6}); n != 12 {
		t.Errorf("grownPartitions(6) = %d, want 12", n)
	}
}

func TestParseHostile(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "processor")
	if err := os.WriteFile(bin, nil, 0o755); err != nil {
		t.Fatal(err)
	}
	o, err := parse([]string{"--processor", bin}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if o.hostile.Scenes != 16 || len(o.hostile.Shares) != len(workload.Kinds()) || o.hostile.Grace != o.grace || o.hostile.MaxFutureSkew != 5*time.Second {
		t.Fatalf("default hostile mix %+v", o.hostile)
	}
	if !slices.Equal(o.scenarios, defaultScenarios()) || slices.Contains(o.scenarios, soakName) || len(o.scenarios) != len(scenarios)-1 {
		t.Fatalf("default scenarios %v: want all but %s, which runs only alone", o.scenarios, soakName)
	}
	// --cluster picks the broker-fault scenarios.
	o, err = parse([]string{"--processor", bin, "--cluster", bin, "--brokers", "b:1"}, io.Discard)
	if err != nil || !slices.Equal(o.scenarios, scenarioNames(brokerScenarios)) || len(o.scenarios) != 6 {
		t.Fatalf("--cluster: scenarios %v, %v", o.scenarios, err)
	}
	o, err = parse([]string{"--processor", bin, "--hostile=false"}, io.Discard)
	if err != nil || o.hostile.Scenes != 0 {
		t.Fatalf("--hostile=false: %+v, %v", o.hostile, err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--hostile-scenes", "0"}, "--hostile-scenes"},
		{[]string{"--hostile-shares", "nosuch=1"}, "--hostile-shares"},
		{[]string{"--grace", "3s", "--hostile-hold", "4s"}, "hostile mix"},
		{[]string{"--scenarios", "broker-leaders"}, "needs --cluster"},
		{[]string{"--bounce-span", "0s"}, "--bounce-span"},
		{[]string{"--cluster", bin}, "needs --brokers"},
		{[]string{"--cluster", bin + ".missing", "--brokers", "b:1"}, "--cluster"},
	} {
		if _, err := parse(append([]string{"--processor", bin}, tc.args...), io.Discard); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parse(%q) = %v, want an error naming %s", tc.args, err, tc.want)
		}
	}
}

// TestTableRow: two lines a scenario, every count in its column.
func TestTableRow(t *testing.T) {
	var out strings.Builder
	h := &harness{out: &out}
	h.header()
	h.tableRow(result{sc: scenario{name: "kill"}, seconds: 1.25, stall: stall{longest: 2250 * time.Millisecond}, rep: oracle.Report{
		SignalsIn: 1, Forwarded: 2, Expected: 3, Duplicates: 4, Lost: 5, Leaked: 6, Late: 7, Hanging: 8, DLQ: 9,
		PoisonNotDLQd: 10, MisroutedNotRepublished: 11, Unknown: 12, ChangelogMismatches: 13,
		MissingWindows: 14, SpuriousWindows: 15, ConservativeWindows: 16, Contradictions: 17,
	}})
	lines := strings.Split(strings.TrimRight(out.String(), "\n"), "\n")
	if len(lines) != 4 {
		t.Fatalf("%d lines:\n%s", len(lines), out.String())
	}
	want := []string{
		"scenario signals_in forwarded expected duplicates lost leaked late hanging dlq seconds stall",
		"poison unrouted unknown changelog win_miss win_spur win_cons contra",
		"kill 1 2 3 4 5 6 7 8 9 1.2 2.2",
		"10 11 12 13 14 15 16 17",
	}
	for i, w := range want {
		if got := strings.Join(strings.Fields(lines[i]), " "); got != w {
			t.Errorf("line %d: %q, want %q", i, got, w)
		}
	}
	// The columns line up with their headers.
	if strings.Index(lines[0], "stall")+len("stall") != len(lines[2]) || len(lines[1]) != len(lines[3]) {
		t.Errorf("columns do not line up:\n%s", out.String())
	}
}

// TestInstanceWindows reads the windows of a user's record from a
// processor's /v1/members, as control-no-window-recovery does.
func TestInstanceWindows(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer t0ken" { // the token of the data dir
			http.Error(w, "no token", http.StatusUnauthorized)
			return
		}
		switch r.URL.Path {
		case "/v1/members/1":
			fmt.Fprint(w, `{"user_id":1,"status":"left","left_at_ns":5,"history":[],"late_leaves":[{"left_at_ns":5,"forwarded_through_ns":9,"exact":true}]}`)
		case "/v1/members/2":
			fmt.Fprint(w, `{"user_id":2,"status":"active","left_at_ns":null,"history":[],"late_leaves":[]}`)
		case "/v1/members/3":
			http.NotFound(w, r)
		default:
			http.Error(w, "broken", http.StatusInternalServerError)
		}
	}))
	defer srv.Close()
	in := &instance{name: "a", dir: t.TempDir()}
	if err := os.WriteFile(filepath.Join(in.dir, "api-token"), []byte("t0ken\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	in.mu.api = strings.TrimPrefix(srv.URL, "http://")
	ctx := context.Background()
	for user, want := range map[uint64]int{1: 1, 2: 0, 3: 0} {
		if n, err := in.windows(ctx, user); err != nil || n != want {
			t.Errorf("windows(%d) = %d, %v; want %d", user, n, err, want)
		}
	}
	if _, err := in.windows(ctx, 4); err == nil || !strings.Contains(err.Error(), "500") {
		t.Errorf("windows(4) = %v, want the server's error", err)
	}
}

// TestInstanceArgs: every processor of a scenario runs with the harness's
// grace and skew (which the load is stamped against) and the scenario's
// flags.
func TestInstanceArgs(t *testing.T) {
	sc, ok := findScenario("control-lso")
	if !ok {
		t.Fatal("no control-lso")
	}
	h := &harness{o: &options{grace: 300 * time.Millisecond, maxFutureSkew: 7 * time.Second, partitions: 3,
		sessionTimeout: 6 * time.Second, logLevel: "info"}, brokers: []string{"b:9092"}}
	h.mu.children = make(map[*instance]bool)
	r := &scenarioRun{h: h, sc: sc, set: workload.Topics("p"), group: "g", dir: t.TempDir()}
	args := strings.Join(r.newInstance("a").args, " ")
	for _, want := range []string{"--brokers b:9092", "--group g", "--grace 300ms", "--max-future-skew 7s", "--partitions 3", "--unsafe-observe-lso"} {
		if !strings.Contains(args, want) {
			t.Errorf("args %q lack %q", args, want)
		}
	}
}

// TestJudgedOffset: the harness reads the judged offset out of the offset
// metadata in each form docs/operations.md ("Handover") gives it.
func TestJudgedOffset(t *testing.T) {
	for _, tc := range []struct {
		meta string
		want int64
		ok   bool
	}{
		{"1796477794068463961:28:AAAAAAAAAAAAAAAAAAAAAA", 28, true},
		{"1796477794068463961:28:", 28, true},
		{"1796477794068463961:0", 0, true},
		{"1796477794068463961", 0, false}, // an older version's: no judged offset
		{"", 0, false},
		{"-1:x:id", 0, false},
	} {
		if got, ok := judgedOffset(tc.meta); got != tc.want || ok != tc.ok {
			t.Errorf("judgedOffset(%q) = %d, %v; want %d, %v", tc.meta, got, ok, tc.want, tc.ok)
		}
	}
}

// TestPortBookGivesEachOnce: the book never gives an address twice, even
// when the probe finds one it gave before (the kernel hands a port closed
// by one probe to the next); it gives up after portTries probes that find
// only those.
func TestPortBookGivesEachOnce(t *testing.T) {
	found := []string{"127.0.0.1:35333", "127.0.0.1:35333", "127.0.0.1:46147", "127.0.0.1:35333", "127.0.0.1:44407"}
	next := 0
	b := &portBook{probe: func() (string, error) {
		if next == len(found) {
			return found[len(found)-1], nil
		}
		next++
		return found[next-1], nil
	}}
	var got []string
	for range 3 {
		addr, err := b.free()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, addr)
	}
	if want := []string{"127.0.0.1:35333", "127.0.0.1:46147", "127.0.0.1:44407"}; !slices.Equal(got, want) {
		t.Fatalf("free gave %v; want %v", got, want)
	}
	if addr, err := b.free(); err == nil {
		t.Fatalf("free gave %s when every probe found a port given before; want an error", addr)
	}

	// The real probe, many times: no address twice.
	book := new(portBook)
	seen := make(map[string]bool)
	for range 200 {
		addr, err := book.free()
		if err != nil {
			t.Fatal(err)
		}
		if seen[addr] {
			t.Fatalf("%s given twice", addr)
		}
		seen[addr] = true
	}
}
