// Package deploy holds the deployment files of cohortgate (the Dockerfile,
// the Kubernetes example, the Prometheus rules, the Grafana dashboard) and,
// in its tests, the checks that they ask only for what the processor
// accepts and serves.
package deploy

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// processor builds cmd/processor into a temporary directory.
func processor(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "processor")
	if out, err := exec.Command("go", "build", "-o", bin, "../cmd/processor").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// runFlags returns the flags of `processor run` by their environment
// variables, as its --help lists them: COHORTGATE_HTTP_ADDR → http-addr.
func runFlags(t *testing.T, bin string) map[string]string {
	t.Helper()
	out, _ := exec.Command(bin, "run", "--help").CombinedOutput() // --help exits 0 or 2 by flag's rules; the text is what counts
	flags := make(map[string]string)
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) >= 3 && strings.HasPrefix(f[0], "--") && strings.HasPrefix(f[1], "COHORTGATE_") {
			flags[f[1]] = strings.TrimPrefix(f[0], "--")
		}
	}
	if len(flags) < 20 {
		t.Fatalf("processor run --help lists %d flags:\n%s", len(flags), out)
	}
	return flags
}

// manifests decodes every document of a multi-document YAML file.
func manifests(t *testing.T, path string) map[string]map[string]any {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	byKind := make(map[string]map[string]any)
	dec := yaml.NewDecoder(f)
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
			return byKind
		} else if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		kind, _ := doc["kind"].(string)
		if byKind[kind] != nil {
			t.Fatalf("%s: two %s documents; the test expects one of each", path, kind)
		}
		byKind[kind] = doc
	}
}

// get walks maps and lists: get(doc, "spec", "template", "containers", 0).
func get(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, _ := v.(map[string]any)
			v = m[k]
		case int:
			l, _ := v.([]any)
			if k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

// freeAddr returns a loopback address nothing listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// served starts the processor (embedded broker) and returns the HTTP
// status of each path on its HTTP port, and of /v1/members/1 on that port
// and, without a token, on its API port; it stops the processor before
// returning.
func served(t *testing.T, bin string, paths []string) map[string]int {
	t.Helper()
	web, api := freeAddr(t), freeAddr(t)
	cmd := exec.Command(bin, "try", "--embedded-addr", freeAddr(t), "--http-addr", web, "--api-addr", api, "--data-dir", t.TempDir(), "--log-level", "warn")
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("processor did not stop within 30s of SIGINT")
		}
	}()
	hc := &http.Client{Timeout: 2 * time.Second}
	codes := make(map[string]int)
	deadline := time.Now().Add(30 * time.Second)
	urls := make(map[string]string)
	for _, p := range paths {
		urls[p] = "http://" + web + p
	}
	urls["http:/v1/members/1"] = "http://" + web + "/v1/members/1"
	urls["api:/v1/members/1"] = "http://" + api + "/v1/members/1"
	for p, url := range urls {
		for {
			resp, err := hc.Get(url)
			if err == nil {
				resp.Body.Close()
				codes[p] = resp.StatusCode
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("GET %s: %v\n%s", p, err, logs.String())
			}
			time.Sleep(50 * time.Millisecond) // the listener comes up after the store opens
		}
	}
	return codes
}

// TestKubernetes: the StatefulSet's probes, ports, arguments and
// environment are what the processor serves and accepts, its data volume
// is where the processor keeps its store, and the PodDisruptionBudget
// covers its pods.
func TestKubernetes(t *testing.T) {
	bin := processor(t)
	flags := runFlags(t, bin)
	docs := manifests(t, "kubernetes/cohortgate.yaml")
	sts := docs["StatefulSet"]
	if sts == nil || docs["PodDisruptionBudget"] == nil || docs["Service"] == nil {
		t.Fatalf("want a StatefulSet, a PodDisruptionBudget and a Service; have %d documents", len(docs))
	}
	pod := get(sts, "spec", "template", "spec")
	c := get(pod, "containers", 0)

	env := make(map[string]string)
	for _, e := range get(c, "env").([]any) {
		name, _ := get(e, "name").(string)
		value, _ := get(e, "value").(string)
		if _, ok := flags[name]; !ok {
			t.Errorf("env %s is no flag of processor run", name)
		}
		env[name] = value
	}
	args, _ := get(c, "args").([]any)
	if len(args) == 0 || args[0] != "run" {
		t.Errorf("args %v: want the run command first", args)
	}
	for _, a := range args[1:] {
		name, _, _ := strings.Cut(strings.TrimPrefix(fmt.Sprint(a), "--"), "=")
		if !contains(flags, name) {
			t.Errorf("argument %v is no flag of processor run", a)
		}
	}

	// The HTTP address listens where the container port and the probes point.
	_, httpPort, err := net.SplitHostPort(env["COHORTGATE_HTTP_ADDR"])
	if err != nil {
		t.Fatalf("COHORTGATE_HTTP_ADDR %q: %v", env["COHORTGATE_HTTP_ADDR"], err)
	}
	ports := make(map[string]string) // name → number
	for _, p := range get(c, "ports").([]any) {
		ports[fmt.Sprint(get(p, "name"))] = fmt.Sprint(get(p, "containerPort"))
	}
	var paths []string
	for _, probe := range []string{"livenessProbe", "readinessProbe"} {
		path, _ := get(c, probe, "httpGet", "path").(string)
		port := fmt.Sprint(get(c, probe, "httpGet", "port"))
		if n, ok := ports[port]; ok {
			port = n
		}
		if port != httpPort {
			t.Errorf("%s on port %s, the processor serves HTTP on %s", probe, port, httpPort)
		}
		paths = append(paths, path)
	}
	if paths[0] != "/healthz" || paths[1] != "/readyz" {
		t.Errorf("liveness on %s and readiness on %s, want /healthz and /readyz", paths[0], paths[1])
	}
	for path, code := range served(t, bin, append(paths, "/metrics")) {
		switch path {
		case "http:/v1/members/1":
			if code != http.StatusNotFound {
				t.Errorf("the HTTP port answers GET /v1/members/1 with %d: want 404, the API is on its own port", code)
			}
		case "api:/v1/members/1":
			if code != http.StatusUnauthorized {
				t.Errorf("the API port answers GET /v1/members/1 without a token with %d, want 401", code)
			}
		default:
			// /readyz may say 503 while the embedded broker's partitions are assigned.
			if code != http.StatusOK && (path != "/readyz" || code != http.StatusServiceUnavailable) {
				t.Errorf("GET %s: %d, want it served", path, code)
			}
		}
	}
	checkAPIGuarded(t, docs, c, env, ports)
	if get(sts, "spec", "template", "metadata", "annotations", "prometheus.io/port") != httpPort {
		t.Errorf("prometheus.io/port is not the HTTP port %s", httpPort)
	}

	// The store is on the volume claim.
	claim := fmt.Sprint(get(sts, "spec", "volumeClaimTemplates", 0, "metadata", "name"))
	mounted := ""
	for _, m := range get(c, "volumeMounts").([]any) {
		if get(m, "name") == claim {
			mounted = fmt.Sprint(get(m, "mountPath"))
		}
	}
	if mounted == "" || mounted != env["COHORTGATE_DATA_DIR"] {
		t.Errorf("volume claim %s mounted at %q, the data dir is %q", claim, mounted, env["COHORTGATE_DATA_DIR"])
	}

	// A final commit fits the termination grace: the default 30s or more.
	if g, _ := get(pod, "terminationGracePeriodSeconds").(int); g < 30 {
		t.Errorf("terminationGracePeriodSeconds %v: want at least 30", get(pod, "terminationGracePeriodSeconds"))
	}
	if get(pod, "securityContext", "runAsNonRoot") != true {
		t.Error("the pod may run as root")
	}
	podLabels := get(sts, "spec", "template", "metadata", "labels").(map[string]any)
	for _, sel := range []any{get(docs["PodDisruptionBudget"], "spec", "selector", "matchLabels"), get(docs["Service"], "spec", "selector")} {
		for k, v := range sel.(map[string]any) {
			if podLabels[k] != v {
				t.Errorf("selector %s=%v does not match the pods' labels %v", k, v, podLabels)
			}
		}
	}
}

// TestDockerfile: the image runs the processor as a non-root user, with its
// data dir a volume and its HTTP port exposed, and sets only variables the
// processor reads.
func TestDockerfile(t *testing.T) {
	bin := processor(t)
	flags := runFlags(t, bin)
	raw, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	got := make(map[string]string) // instruction → its arguments (ENV: joined)
	env := make(map[string]string)
	text := strings.ReplaceAll(string(raw), "\\\n", " ")
	for _, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		instr, rest, _ := strings.Cut(line, " ")
		got[instr] = strings.TrimSpace(rest)
		if instr == "ENV" {
			for _, kv := range strings.Fields(rest) {
				k, v, _ := strings.Cut(kv, "=")
				env[k] = v
			}
		}
	}
	for k := range env {
		if _, ok := flags[k]; !ok {
			t.Errorf("ENV %s is no flag of processor run", k)
		}
	}
	if got["FROM"] != "scratch" {
		t.Errorf("FROM %s: want scratch, for a static binary", got["FROM"])
	}
	if u := got["USER"]; u == "" || strings.HasPrefix(u, "0") || strings.HasPrefix(u, "root") {
		t.Errorf("USER %q: want a non-root user", u)
	}
	if want := `["` + env["COHORTGATE_DATA_DIR"] + `"]`; got["VOLUME"] != want {
		t.Errorf("VOLUME %s, want the data dir %s", got["VOLUME"], want)
	}
	_, port, _ := net.SplitHostPort(env["COHORTGATE_HTTP_ADDR"])
	if got["EXPOSE"] != port {
		t.Errorf("EXPOSE %s, the HTTP address is %s", got["EXPOSE"], env["COHORTGATE_HTTP_ADDR"])
	}
	if got["ENTRYPOINT"] != `["/processor"]` || got["CMD"] != `["run"]` {
		t.Errorf("ENTRYPOINT %s CMD %s: want /processor run", got["ENTRYPOINT"], got["CMD"])
	}
	if _, err := strconv.Atoi(strings.Split(got["USER"], ":")[0]); err != nil {
		t.Errorf("USER %s: want a numeric uid, so that runAsNonRoot can check it", got["USER"])
	}
}

// checkAPIGuarded: the membership API listens on a container port of its
// own, with a token from a mounted Secret; the scraped Service does not
// expose it, and the NetworkPolicy opens it only to selected clients.
func checkAPIGuarded(t *testing.T, docs map[string]map[string]any, c any, env, ports map[string]string) {
	t.Helper()
	_, apiPort, err := net.SplitHostPort(env["COHORTGATE_API_ADDR"])
	if err != nil {
		t.Fatalf("COHORTGATE_API_ADDR %q: %v", env["COHORTGATE_API_ADDR"], err)
	}
	if ports["api"] != apiPort {
		t.Errorf("container port api is %q, COHORTGATE_API_ADDR listens on %s", ports["api"], apiPort)
	}
	tokenFile := env["COHORTGATE_API_TOKEN_FILE"]
	mountedSecret := false
	for _, m := range get(c, "volumeMounts").([]any) {
		if dir := fmt.Sprint(get(m, "mountPath")); tokenFile != "" && strings.HasPrefix(tokenFile, dir+"/") {
			name := get(m, "name")
			for _, v := range get(docs["StatefulSet"], "spec", "template", "spec", "volumes").([]any) {
				mountedSecret = mountedSecret || (get(v, "name") == name && get(v, "secret", "secretName") != nil)
			}
		}
	}
	if !mountedSecret {
		t.Errorf("COHORTGATE_API_TOKEN_FILE %q is not in a mounted Secret", tokenFile)
	}
	for _, p := range get(docs["Service"], "spec", "ports").([]any) {
		if tp := fmt.Sprint(get(p, "targetPort")); tp == "api" || tp == apiPort || fmt.Sprint(get(p, "port")) == apiPort {
			t.Errorf("the scraped Service exposes the API port: %v", p)
		}
	}
	np := docs["NetworkPolicy"]
	if np == nil {
		t.Fatal("no NetworkPolicy")
	}
	for k, v := range get(np, "spec", "podSelector", "matchLabels").(map[string]any) {
		if get(docs["StatefulSet"], "spec", "template", "metadata", "labels", k) != v {
			t.Errorf("the NetworkPolicy selects %s=%v, not the pods", k, v)
		}
	}
	apiRules := 0
	for _, rule := range get(np, "spec", "ingress").([]any) {
		for _, p := range get(rule, "ports").([]any) {
			if port := fmt.Sprint(get(p, "port")); port == "api" || port == apiPort {
				apiRules++
				if from, _ := get(rule, "from").([]any); len(from) == 0 {
					t.Error("the NetworkPolicy opens the API port to every source")
				}
			}
		}
		if ports, _ := get(rule, "ports").([]any); len(ports) == 0 {
			t.Error("a NetworkPolicy rule opens every port")
		}
	}
	if apiRules == 0 {
		t.Error("the NetworkPolicy lets no client reach the API port")
	}
}

func contains(flags map[string]string, name string) bool {
	for _, f := range flags {
		if f == name {
			return true
		}
	}
	return false
}
