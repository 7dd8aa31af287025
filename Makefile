# Targets are the interface CI calls (.ci/run). build, run, test, lint, fuzz,
# clean and bench-scale work on a fresh machine with Go alone; the others
# need a broker (kafka-start: Java and Maven) or the tool their comment names.

GO        ?= go
BIN       := bin/processor
FUZZTIME  ?= 60s
KAFKA     := bash integration/kafka/kafka.sh
# Tests against a real broker read its address from here.
KAFKA_BROKERS ?= 127.0.0.1:9092

.PHONY: build run test test-kafka kafka-start kafka-stop bench fuzz lint size-guard clean examples promtool image image-context

# -buildvcs=auto: stamp the VCS revision (processor version,
# cohortgate_build_info) even where GOFLAGS turns it off; a tree without
# git builds all the same. (Go stamps nothing in a git worktree.)
build:
	$(GO) build -buildvcs=auto -o $(BIN) ./cmd/processor

# Runs the processor in its trying-out mode (`processor try`): an embedded
# Kafka-protocol broker on 127.0.0.1:9092, state in ./cohortgate-data, HTTP
# on 127.0.0.1:8080. `processor run` is the production mode: it needs
# --brokers and never starts a broker of its own.
run: build
	./$(BIN) try

# Unit tests and the integration suite on the embedded broker; no Java needed.
test:
	$(GO) vet ./...
	$(GO) test -race -count=1 -timeout 30m ./...

# The integration suite against a real Apache Kafka broker at KAFKA_BROKERS
# (start one with `make kafka-start`).
# -v, because go test shows a passing package's output only in verbose
# mode, and the log must show which broker (and version) the suite ran on.
# The harnesses under integration/ (bench, chaos, loadgen) are left out:
# their tests run on their own embedded broker whatever KAFKA_BROKERS
# says, and make test runs them.
KAFKA_TEST_PACKAGES := ./integration ./integration/oracle/... ./integration/workload/... ./pkg/fanout/...

test-kafka:
	KAFKA_BROKERS=$(KAFKA_BROKERS) bash -o pipefail -c "$(GO) test -race -count=1 -timeout 45m -v $(KAFKA_TEST_PACKAGES) 2>&1 | grep -v -E '^=== (RUN|PAUSE|CONT|NAME)'"

kafka-start:
	$(KAFKA) start

kafka-stop:
	$(KAFKA) stop

# The benchmarks whose aims BENCHMARKS.md states, in one run against the
# broker at KAFKA_BROKERS
# (start one with `make kafka-start`): the pkg/gate benchmarks, then
# integration/bench (drop agreement, then throughput of the passthrough, the
# processor and the Kafka Streams app of integration/bench/streams, plain and with a grace,
# in interleaved rounds; leave latency, restore); results are appended to
# BENCHMARKS.md. Needs Java 17 and Maven for integration/bench/streams. Bigger or partial
# runs through BENCHFLAGS, e.g. BENCHFLAGS='--signals 30000000' or
# BENCHFLAGS='--phases throughput --runs passthrough,processor-eos'.
BENCHFLAGS ?=

bench:
	@mkdir -p bin
	$(GO) build -o bin/processor ./cmd/processor
	$(GO) build -o bin/loadgen ./integration/loadgen
	$(GO) build -o bin/bench ./integration/bench
	mvn -q -B -Dstyle.color=never -f integration/bench/streams/pom.xml package -DskipTests
	bash -o pipefail -c "$(GO) test -run '^$$' -bench . -benchmem -timeout 30m ./pkg/gate | tee bin/bench-gate.txt"
	./bin/bench run --brokers $(KAFKA_BROKERS) --go $(GO) --gate-results bin/bench-gate.txt \
		--invoked-as "make bench KAFKA_BROKERS=$(KAFKA_BROKERS)$(if $(BENCHFLAGS), BENCHFLAGS='$(BENCHFLAGS)')" $(BENCHFLAGS)

# Runs every fuzz target for FUZZTIME each.
fuzz:
	@set -e; for pkg in ./topics ./pkg/gate ./pkg/membership ./pkg/fanout; do \
		for target in $$($(GO) test -list '^Fuzz' $$pkg | grep '^Fuzz'); do \
			echo "== $$pkg $$target ($(FUZZTIME))"; \
			$(GO) test $$pkg -run '^$$' -fuzz "^$$target$$" -fuzztime $(FUZZTIME) -parallel 1; \
		done; \
	done

lint: size-guard
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	if [ -n "$$unformatted" ]; then echo "gofmt -w these files:"; echo "$$unformatted"; exit 1; fi
	$(GO) vet ./...
	$(GO) tool staticcheck ./...

# No tracked file over 1 MiB unless .ci/large-files lists it (binaries go
# to bin/); the self-test shows the guard refuses such a file.
size-guard:
	bash .ci/size-guard --self-test
	bash .ci/size-guard

clean:
	rm -rf bin cohortgate-data examples/java/target

# The example producers of examples/ (EXAMPLES: python, java or both)
# against the processor's embedded broker (processor try) on
# EXAMPLES_KAFKA: each leave's receipt must reach the changelog. The
# processor's HTTP and API ports are EXAMPLES_HTTP and EXAMPLES_API; set
# them when those ports are taken. Needs python3 with confluent-kafka
# (pip install confluent-kafka), and for java a JDK and Maven.
EXAMPLES       ?= python java
EXAMPLES_KAFKA ?= 127.0.0.1:19092
EXAMPLES_HTTP  ?= 127.0.0.1:18080
EXAMPLES_API   ?= 127.0.0.1:18081

examples: build
	EXAMPLES_KAFKA=$(EXAMPLES_KAFKA) EXAMPLES_HTTP=$(EXAMPLES_HTTP) EXAMPLES_API=$(EXAMPLES_API) \
		bash examples/check.sh $(EXAMPLES)

# The OCI image of deploy/Dockerfile: a static binary (CGO_ENABLED=0) on
# an empty base, built from bin/image with no network and no base image.
# OCI is the builder: docker build, buildah bud, podman build.
IMAGE ?= cohortgate:dev
OCI   ?= docker build
GOARCH_IMAGE ?= $(shell $(GO) env GOARCH)

image-context:
	rm -rf bin/image && mkdir -p bin/image/data
	CGO_ENABLED=0 GOOS=linux GOARCH=$(GOARCH_IMAGE) $(GO) build -buildvcs=auto -trimpath -ldflags='-s -w' -o bin/image/processor ./cmd/processor
	cp /etc/ssl/certs/ca-certificates.crt bin/image/
	cp deploy/Dockerfile bin/image/

image: image-context
	$(OCI) -t $(IMAGE) bin/image

# The alert rules, by Prometheus's own tool (Debian: apt-get install
# prometheus): they load, and each alert's unit tests pass.
promtool:
	promtool check rules deploy/prometheus/alerts.yml
	promtool test rules deploy/prometheus/alerts_test.yml

# The chaos harness (integration/chaos, see its package comment): the processor
# binary under kill -9, scale 1 → 3 → 1, SIGSTOP past the session timeout,
# a wiped store, the topics grown from --partitions to twice as many under
# the load (repartition) and the commands topic deleted and created again
# (recreate), plus control runs that must show the damage their names
# promise, each judged by integration/oracle; a table, and a non-zero exit
# on damage. (repartition grows the commands before the inputs;
# CHAOS_FLAGS=--grow-inputs-first grows the inputs first.) The load is the friendly one plus the hostile mix
# (integration/workload: misrouted, transactional, re-delivered, late,
# same-millisecond, future and poison records): CHAOS_SCENES scenes of it
# per scenario, 16 in chaos-short and 64 in chaos unless set. It runs against CHAOS_BROKERS (default KAFKA_BROKERS: start
# one with `make kafka-start`); CHAOS_BROKERS= runs it on an in-process
# kfake broker. chaos-short is the few-minute CI version, with two routes
# (every signal written to both inputs, each output judged); chaos is the
# long one (1M signals over 100k users, one route). Extra flags go in CHAOS_FLAGS (e.g.
# --keep, --hostile-shares txn-held=2,poison=1, or --hostile=false for the
# friendly load alone). chaos then runs the property test
# TestShortcutsEqualReplay (integration/property_test.go) on
# PROPERTY_HISTORIES random histories (make test runs 3) and the clocks'
# TestClockStepsKeepThePromise on CLOCK_HISTORIES (make test runs 2)
# against the same brokers (CHAOS_BROKERS= : the embedded one).
CHAOS_BROKERS ?= $(KAFKA_BROKERS)
CHAOS_FLAGS   ?=
PROPERTY_HISTORIES ?= 40
CLOCK_HISTORIES ?= 40

.PHONY: chaos chaos-short

chaos: build
	$(GO) build -o bin/chaos ./integration/chaos
	./bin/chaos --processor $(BIN) --brokers '$(CHAOS_BROKERS)' \
		--signals 1000000 --users 100000 --leave-pct 5 --rejoin-pct 1 \
		--hostile --hostile-scenes $(or $(CHAOS_SCENES),64) \
		--rounds 20 --timeout 20m $(CHAOS_FLAGS)
	KAFKA_BROKERS='$(CHAOS_BROKERS)' COHORTGATE_PROPERTY_HISTORIES=$(PROPERTY_HISTORIES) \
		COHORTGATE_CLOCK_HISTORIES=$(CLOCK_HISTORIES) \
		$(GO) test -race -count=1 -timeout 60m -run '^(TestShortcutsEqualReplay|TestClockStepsKeepThePromise)$$' ./integration/

chaos-short: build
	$(GO) build -o bin/chaos ./integration/chaos
	./bin/chaos --processor $(BIN) --brokers '$(CHAOS_BROKERS)' \
		--signals 60000 --users 6000 --leave-pct 5 --rejoin-pct 1 --routes 2 \
		--hostile --hostile-scenes $(or $(CHAOS_SCENES),16) \
		--rounds 10 --timeout 5m $(CHAOS_FLAGS)

# The security tests (TestSecure*: TLS, SASL and least-privilege ACLs)
# against the SASL_SSL broker with an ACL authorizer. Starts nothing: run `bash integration/kafka/kafka.sh start-secure`
# first; its address and credentials come from `kafka.sh secure-env`. A
# missing secure broker fails the run instead of skipping it.
test-secure:
	eval "$$(bash integration/kafka/kafka.sh secure-env)" && \
	COHORTGATE_REQUIRE_SECURE=1 $(GO) test -race -count=1 -timeout 10m -run 'TestSecure' -v ./integration
.PHONY: test-secure

# The broker-fault scenarios of integration/chaos on kafka.sh's
# three-node cluster (127.0.0.1:29092-29094; KRaft, a controller quorum of
# three, replication factor 3, min.insync.replicas 2): leaders, the
# transaction coordinator and the controller killed, a broker paused, a
# rolling restart, two brokers down. Each target starts the cluster, runs
# the scenarios and stops the cluster whatever happened (Ctrl-C too).
# test-cluster-short is CI's few-minute form. Extra flags in CLUSTER_FLAGS
# (e.g. --scenarios broker-leaders,broker-two-down or --keep). A cluster on
# other ports: KAFKA_CLUSTER_PORT (and KAFKA_CLUSTER_CONTROLLER_PORT,
# KAFKA_CLUSTER_RUN_DIR) in the environment and CLUSTER_BROKERS to match.
CLUSTER_BROKERS ?= 127.0.0.1:29092,127.0.0.1:29093,127.0.0.1:29094
CLUSTER_FLAGS   ?=
CLUSTER_CHAOS    = trap '$(KAFKA) stop-cluster' EXIT INT TERM; $(KAFKA) start-cluster && \
	./bin/chaos --processor $(BIN) --brokers $(CLUSTER_BROKERS) --cluster integration/kafka/kafka.sh

.PHONY: test-cluster test-cluster-short start-cluster stop-cluster

test-cluster: build
	$(GO) build -o bin/chaos ./integration/chaos
	$(CLUSTER_CHAOS) --signals 30000 --users 3000 --rounds 4 --hostile-scenes 16 --timeout 15m $(CLUSTER_FLAGS)

test-cluster-short: build
	$(GO) build -o bin/chaos ./integration/chaos
	$(CLUSTER_CHAOS) --signals 10000 --users 1000 --rounds 2 --hostile-scenes 8 --bounce-span 10s --timeout 8m $(CLUSTER_FLAGS)

start-cluster:
	$(KAFKA) start-cluster

stop-cluster:
	$(KAFKA) stop-cluster

# Restart to ready at 1M to 100M members (docs/operations.md, "Restarts:
# the gate snapshot"); not part of bench
# or CI, and needs no broker. Builds each store with membership.Bulk under
# SCALE_WORK (kept for the next run: about 8 GB at 100M; rm -rf it after),
# starts bin/processor on it (embedded broker) by the store scan, from
# the gate snapshot, and after kill -9 under a load of leaves (a clone of
# the store, a snapshot written while running and older than the store;
# SCALE_FLAGS=--crash=false skips it), times lookups, and writes BENCHMARKS-scale.csv,
# BENCHMARKS-scale.png and a section of BENCHMARKS.md. SIZES: members,
# comma-separated; RUNS: starts of each path per size (median, min, max).
SIZES      ?= 1000000,10000000,30000000,100000000
RUNS       ?= 3
SCALE_WORK ?= bin/scale-work
SCALE_FLAGS ?=

.PHONY: bench-scale
bench-scale:
	@mkdir -p bin
	$(GO) build -o bin/processor ./cmd/processor
	$(GO) build -o bin/bench ./integration/bench
	./bin/bench scale --sizes $(SIZES) --runs $(RUNS) --work-dir $(SCALE_WORK) $(SCALE_FLAGS) --invoked-as "make bench-scale SIZES=$(SIZES) RUNS=$(RUNS) $(SCALE_FLAGS)"

# The empty-owner handover (docs/operations.md, "Handover";
# integration/bench/handover.go): a
# partition of HANDOVER_COMMANDS commands (a leave and a rejoin per user),
# then rounds of a processor with an empty data dir replaying it from
# offset 0 and one restoring it from the changelog (RUNS, as for
# bench-scale); prints the time from
# the assignment to the first forwarded signal and the CPU seconds, median
# (min–max). Against KAFKA_BROKERS; not part of make bench. For an A/B of a
# change, ./bin/bench handover --keep once, then --reuse <name> with
# --baseline <other binary> (--replay=false skips the replays, --profile
# takes CPU profiles); see integration/bench/handover.go.
HANDOVER_COMMANDS ?= 2000000

.PHONY: bench-handover
bench-handover:
	@mkdir -p bin
	$(GO) build -o bin/processor ./cmd/processor
	$(GO) build -o bin/bench ./integration/bench
	./bin/bench handover --brokers $(KAFKA_BROKERS) --commands $(HANDOVER_COMMANDS) --reps $(RUNS)

# 1, 2 and 3 instances in one group on the same load
# (integration/bench/instances.go): a history of MEMBERS users (a leave and a
# rejoin each, over 6 partitions) applied by a seed processor, then RUNS
# rounds that grow one group from 1 to 3 instances, each new one with an
# empty data dir (it restores its partitions from the changelog). Each
# step: the time from the last rebalance to every partition forwarding a
# probe again, and the group's total CPU-seconds per million signals
# (and signals/s) over INSTANCES_SIGNALS signals written in one
# transaction; median [min – max] over the rounds. Appends a section to
# BENCHMARKS.md; logs under bin/instances-work. INSTANCES_FLAGS adds flags
# (--cold: each step starts its n instances at once into an empty group).
# Against KAFKA_BROKERS;
# not part of make bench (the seed replays 2×MEMBERS commands: 94 s at
# 1M, 15 min at 10M on a shared 2-core machine; the whole run took 4m20s
# at 1M with RUNS=3 and 18m27s at 10M with RUNS=1).
MEMBERS           ?= 1000000
INSTANCES_SIGNALS ?= 5000000
INSTANCES_FLAGS   ?=

.PHONY: bench-instances
bench-instances:
	@mkdir -p bin
	$(GO) build -o bin/processor ./cmd/processor
	$(GO) build -o bin/bench ./integration/bench
	./bin/bench instances --brokers $(KAFKA_BROKERS) --members $(MEMBERS) --signals $(INSTANCES_SIGNALS) --runs $(RUNS) $(INSTANCES_FLAGS) \
		--invoked-as "make bench-instances KAFKA_BROKERS=$(KAFKA_BROKERS) MEMBERS=$(MEMBERS) INSTANCES_SIGNALS=$(INSTANCES_SIGNALS) RUNS=$(RUNS)$(if $(INSTANCES_FLAGS), INSTANCES_FLAGS='$(INSTANCES_FLAGS)')"

# The soak (integration/chaos --scenarios soak; its package comment,
# "Soak", states the rule): one processor binary for DURATION under a
# steady load of leaves, rejoins and the hostile mix, at RATE signals/s,
# or with RATE=0 half the maximum a short probe measures first (uncapped:
# the oracle keeps ~5 bytes a signal; SOAK_FLAGS --soak-max-signals N
# lowers the rate to fit N, as CI does). Samples RSS,
# Go heap, goroutines, gate members, held bytes and consumer lag every
# 10s into bin/soak/soak-<run>.csv and .png, prints a verdict table, and
# exits non-zero when a metric grows without bound once warm or the oracle
# finds damage. Against SOAK_BROKERS (default KAFKA_BROKERS: start one
# with `make kafka-start`). Extra flags in SOAK_FLAGS.
DURATION     ?= 10m
RATE         ?= 0
SOAK_BROKERS ?= $(KAFKA_BROKERS)
SOAK_FLAGS   ?=

.PHONY: soak

soak: build
	$(GO) build -o bin/chaos ./integration/chaos
	./bin/chaos --processor $(BIN) --brokers '$(SOAK_BROKERS)' --scenarios soak \
		--soak-duration $(DURATION) --rate $(RATE) --soak-out bin/soak \
		--users 100000 --leave-pct 5 --rejoin-pct 1 --hostile $(SOAK_FLAGS)
