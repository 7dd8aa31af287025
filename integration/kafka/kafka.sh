#!/usr/bin/env bash
# Runs a real single-node Apache Kafka broker (KRaft combined mode) for the
# integration tests. The broker jars come from Maven (see pom.xml) and are
# cached in .cache/libs next to this script; nothing downloaded is committed.
#
# Usage: kafka.sh fetch|start|stop|status|version|clean
#        kafka.sh start-secure|stop-secure|status-secure|secure-env|clean-secure
#        kafka.sh start-cluster|stop-cluster|status-cluster|clean-cluster
#        kafka.sh kill-broker|pause-broker|resume-broker|stop-broker|restart-broker N
#
# The *-secure commands run a second, separate broker with a SASL_SSL
# listener, an ACL authorizer and SCRAM users (see "secure broker" below and
# docs/operations.md); `start` and the plain broker are unaffected by them.
#
# Environment:
#   KAFKA_PORT             PLAINTEXT listener port (default 9092)
#   KAFKA_CONTROLLER_PORT  KRaft controller port (default 9093)
#   KAFKA_RUN_DIR          data, logs, config and pid file (default .cache/run)
#   KAFKA_HEAP             JVM heap flags (default "-Xms256m -Xmx512m")
#   KAFKA_START_TIMEOUT    seconds to wait for readiness (default 90)
#   KAFKA_STOP_TIMEOUT     seconds to wait after SIGTERM before SIGKILL (default 30)
#   KAFKA_CACHE_DIR        jar cache root (default .cache next to this script)
#   KAFKA_CDS              1 (default): class-data-sharing archive for faster starts; 0: off
#   JAVA_HOME              Java 17+ to run the broker (default: java on PATH)
#   KAFKA_SECURE_PORT      secure broker: SASL_SSL listener port (default 9094)
#   KAFKA_SECURE_CONTROLLER_PORT  secure broker: controller (mTLS) port (default 9095)
#   KAFKA_SECURE_RUN_DIR   secure broker: run dir (default .cache/run-secure)
#   KAFKA_CLUSTER_PORT     cluster: node N's client port is this + N-1 (default 29092)
#   KAFKA_CLUSTER_CONTROLLER_PORT  cluster: node N's controller port is this + N-1 (default 29192)
#   KAFKA_CLUSTER_RUN_DIR  cluster: run dirs N = 1..3 under it (default .cache/run-cluster)
#   KAFKA_CLUSTER_HEAP     cluster: JVM heap flags per node (default "-Xms128m -Xmx384m")
#
# The *-cluster commands run three brokers (KRaft, a controller quorum of
# three, replication factor 3, min.insync.replicas 2); kill-broker (kill -9),
# pause-broker (SIGSTOP), resume-broker (SIGCONT), stop-broker (SIGTERM) and
# restart-broker (start a stopped node over its data) act on node N = 1..3.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
POM="$SCRIPT_DIR/pom.xml"
CACHE_DIR="${KAFKA_CACHE_DIR:-$SCRIPT_DIR/.cache}"
LIBS_DIR="$CACHE_DIR/libs"
STAMP_FILE="$LIBS_DIR/.fetched"
CDS_DIR="$CACHE_DIR/cds"

# set_run_dir points every per-broker path at run dir $1: config, data,
# logs and pid file. Each broker (plain, secure, each cluster node) has one.
set_run_dir() {
  RUN_DIR="$1"
  DATA_DIR="$RUN_DIR/data"
  LOG_DIR="$RUN_DIR/logs"
  CONF_FILE="$RUN_DIR/server.properties"
  LOG4J_FILE="$RUN_DIR/log4j2.xml"
  TOOLS_LOG4J_FILE="$RUN_DIR/tools-log4j2.xml"
  PID_FILE="$RUN_DIR/kafka.pid"
  CDS_PENDING="$RUN_DIR/cds-pending"
  SERVER_LOG="$LOG_DIR/server.log"
  OUT_LOG="$LOG_DIR/kafka.out"
}
set_run_dir "${KAFKA_RUN_DIR:-$CACHE_DIR/run}"

HOST=127.0.0.1
PORT="${KAFKA_PORT:-9092}"
CONTROLLER_PORT="${KAFKA_CONTROLLER_PORT:-9093}"
BOOTSTRAP="$HOST:$PORT"
HEAP="${KAFKA_HEAP:--Xms256m -Xmx512m}"
START_TIMEOUT="${KAFKA_START_TIMEOUT:-90}"
STOP_TIMEOUT="${KAFKA_STOP_TIMEOUT:-30}"
# Same GC/JIT flags as bin/kafka-run-class.sh (KAFKA_JVM_PERFORMANCE_OPTS).
JVM_OPTS=(-server -XX:+UseG1GC -XX:MaxGCPauseMillis=20
  -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent
  -XX:MaxInlineLevel=15 -Djava.awt.headless=true)

# More JVM flags of the current mode (the cluster's nodes).
EXTRA_JVM_OPTS=()

log() { printf 'kafka.sh%s: %s\n' "${LOG_TAG:-}" "$*" >&2; }
die() { log "error: $*"; exit 1; }

# ---------------------------------------------------------------- java

JAVA=""
JAVA_ID=""
find_java() {
  [[ -n "$JAVA" ]] && return 0
  if [[ -n "${JAVA_HOME:-}" && -x "$JAVA_HOME/bin/java" ]]; then
    JAVA="$JAVA_HOME/bin/java"
  elif command -v java >/dev/null 2>&1; then
    JAVA="$(command -v java)"
  else
    die "no java found: install a JDK 17+ or set JAVA_HOME"
  fi
  local props spec major
  props="$("$JAVA" -XshowSettings:properties -version 2>&1)"
  spec="$(sed -n 's/^ *java\.specification\.version = //p' <<<"$props")"
  JAVA_ID="$(grep -E '^ *(java\.home|java\.vm\.version) = ' <<<"$props" | tr -d ' ')"
  major="${spec#1.}"
  major="${major%%.*}"
  if [[ ! "$major" =~ ^[0-9]+$ ]] || ((major < 17)); then
    die "Kafka 4.x needs Java 17+, but $JAVA is version '${spec:-unknown}' (set JAVA_HOME)"
  fi
}

classpath() { printf '%s/*' "$LIBS_DIR"; }

# Runs a Kafka command-line tool class from the cache, logging to stderr.
run_tool() {
  find_java
  write_tools_log4j
  "$JAVA" -Xmx256m -XX:+UseSerialGC -XX:TieredStopAtLevel=1 \
    "-Dlog4j2.configurationFile=$TOOLS_LOG4J_FILE" \
    -cp "$(classpath)" "$@"
}

# ---------------------------------------------------------------- fetch

pom_hash() { sha256sum "$POM" | cut -d' ' -f1; }

cache_ok() {
  [[ -f "$STAMP_FILE" ]] && [[ "$(cat "$STAMP_FILE")" == "$(pom_hash)" ]] &&
    compgen -G "$LIBS_DIR/kafka_2.13-*.jar" >/dev/null
}

cmd_fetch() {
  if cache_ok; then
    log "jar cache is up to date ($(kafka_version), $LIBS_DIR)"
    return 0
  fi
  command -v mvn >/dev/null 2>&1 || die "mvn not found: install Maven (apt-get install -y maven)"
  mkdir -p "$CACHE_DIR"
  local tmp="$CACHE_DIR/libs.tmp.$$"
  rm -rf "$tmp"
  log "resolving Kafka jars with Maven into $LIBS_DIR ..."
  if ! mvn -q -B -Dstyle.color=never -f "$POM" dependency:copy-dependencies \
    -DincludeScope=runtime -DoutputDirectory="$tmp" >"$CACHE_DIR/fetch.log" 2>&1; then
    cat "$CACHE_DIR/fetch.log" >&2
    rm -rf "$tmp"
    die "mvn dependency:copy-dependencies failed (log: $CACHE_DIR/fetch.log)"
  fi
  compgen -G "$tmp/kafka_2.13-*.jar" >/dev/null || {
    rm -rf "$tmp"
    die "Maven did not provide kafka_2.13"
  }
  pom_hash >"$tmp/.fetched"
  rm -rf "$LIBS_DIR"
  mv "$tmp" "$LIBS_DIR"
  rm -rf "$SCRIPT_DIR/target"
  log "fetched $(kafka_version): $(find "$LIBS_DIR" -name '*.jar' | wc -l) jars, $(du -sh "$LIBS_DIR" | cut -f1)"
}

# Kafka version from the cached kafka_2.13 jar name (cheap, no JVM).
kafka_version() {
  local jar
  jar="$(compgen -G "$LIBS_DIR/kafka_2.13-*.jar" | head -n1)" || true
  [[ -n "$jar" ]] || { echo "kafka (not fetched)"; return 0; }
  jar="${jar##*/kafka_2.13-}"
  echo "kafka ${jar%.jar}"
}

cmd_version() {
  cache_ok || cmd_fetch
  # kafka.Kafka --version prints the version baked into the jars
  # (kafka/kafka-version.properties in kafka-clients), like bin/kafka-server-start.sh --version.
  find_java
  local v commit=""
  v="$("$JAVA" -cp "$(classpath)" kafka.Kafka --version 2>/dev/null | tail -n1)" || v=""
  [[ -n "$v" ]] || { kafka_version; return 0; }
  if command -v unzip >/dev/null 2>&1; then
    commit="$(unzip -p "$LIBS_DIR"/kafka-clients-*.jar kafka/kafka-version.properties 2>/dev/null |
      sed -n 's/^commitId=//p')" || commit=""
  fi
  echo "kafka $v${commit:+ (commit $commit)}"
}

# ---------------------------------------------------------------- process helpers

read_pid() {
  [[ -f "$PID_FILE" ]] || return 1
  local pid
  pid="$(cat "$PID_FILE" 2>/dev/null || true)"
  [[ "$pid" =~ ^[0-9]+$ ]] || return 1
  echo "$pid"
}

# True if pid is alive and is our broker (guards against pid reuse).
is_our_broker() {
  local pid="$1" cmdline
  kill -0 "$pid" 2>/dev/null || return 1
  cmdline="$(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null || true)"
  [[ "$cmdline" == *kafka.Kafka* && "$cmdline" == *"$CONF_FILE"* ]]
}

running_pid() {
  local pid
  pid="$(read_pid)" || return 1
  is_our_broker "$pid" || return 1
  echo "$pid"
}

port_in_use() {
  # A successful TCP connect means somebody listens there.
  (exec 3<>"/dev/tcp/$HOST/$1") 2>/dev/null
}

# Asks the broker for cluster metadata. Succeeds only on a real answer.
probe_metadata() {
  if [[ "$SECURE" == 1 ]]; then
    probe_secure_metadata
    return
  fi
  if [[ "$CLUSTER" == 1 ]]; then
    probe_cluster_node
    return
  fi
  if command -v kcat >/dev/null 2>&1; then
    kcat -L -b "$BOOTSTRAP" -m 5 2>/dev/null | grep -q ' 1 brokers:'
  else
    run_tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$BOOTSTRAP" --list \
      --command-config <(printf 'default.api.timeout.ms=15000\nrequest.timeout.ms=10000\n') >/dev/null 2>&1
  fi
}

# Cheap readiness hint used before the (slower, JVM based) fallback probe.
broker_started_line() {
  [[ -f "$SERVER_LOG" ]] && grep -q 'Kafka Server started' "$SERVER_LOG"
}

maybe_install_kcat() {
  command -v kcat >/dev/null 2>&1 && return 0
  [[ "${KAFKA_NO_APT:-}" == 1 ]] && return 0
  [[ "$(id -u)" == 0 ]] && command -v apt-get >/dev/null 2>&1 || return 0
  log "kcat not found, installing it with apt-get (set KAFKA_NO_APT=1 to skip)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq kcat >/dev/null 2>&1 ||
    { apt-get update -qq >/dev/null 2>&1 && apt-get install -y -qq kcat >/dev/null 2>&1; } ||
    log "could not install kcat; falling back to the broker's own TopicCommand for probing"
}

tail_log() {
  local f
  for f in "$SERVER_LOG" "$OUT_LOG"; do
    [[ -s "$f" ]] || continue
    log "---- last 50 lines of $f ----"
    tail -n 50 "$f" >&2
  done
}

# ---------------------------------------------------------------- config

write_tools_log4j() {
  [[ -f "$TOOLS_LOG4J_FILE" ]] && return 0
  mkdir -p "$RUN_DIR"
  cat >"$TOOLS_LOG4J_FILE" <<'EOF'
<?xml version="1.0" encoding="UTF-8"?>
<Configuration status="WARN">
  <Appenders>
    <Console name="STDERR" target="SYSTEM_ERR">
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
    </Console>
  </Appenders>
  <Loggers>
    <Root level="WARN"><AppenderRef ref="STDERR"/></Root>
  </Loggers>
</Configuration>
EOF
}

write_config() {
  mkdir -p "$DATA_DIR" "$LOG_DIR"
  if [[ "$SECURE" == 1 ]]; then
    write_secure_config
  elif [[ "$CLUSTER" == 1 ]]; then
    write_cluster_config
  else
    write_plain_config
  fi
  write_server_log4j
}

write_plain_config() {
  cat >"$CONF_FILE" <<EOF
# Generated by integration/kafka/kafka.sh - single node KRaft (combined mode).
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@$HOST:$CONTROLLER_PORT
listeners=PLAINTEXT://$HOST:$PORT,CONTROLLER://$HOST:$CONTROLLER_PORT
advertised.listeners=PLAINTEXT://$HOST:$PORT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$DATA_DIR

$(single_node_settings)
EOF
}

# single_node_settings prints the settings both broker configurations share.
single_node_settings() {
  cat <<'EOF'
auto.create.topics.enable=false
default.replication.factor=1
min.insync.replicas=1
group.initial.rebalance.delay.ms=0

# Internal topics on one node: replication factor 1, few partitions so the
# first consumer group / transactional producer is fast.
offsets.topic.replication.factor=1
offsets.topic.num.partitions=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1

num.network.threads=2
num.io.threads=4
num.recovery.threads.per.data.dir=1
EOF
}

write_server_log4j() {
  cat >"$LOG4J_FILE" <<EOF
<?xml version="1.0" encoding="UTF-8"?>
<Configuration status="WARN">
  <Appenders>
    <RollingFile name="SERVER" fileName="$SERVER_LOG" filePattern="$SERVER_LOG.%i">
      <PatternLayout pattern="[%d] %p %m (%c)%n"/>
      <Policies><SizeBasedTriggeringPolicy size="50 MB"/></Policies>
      <DefaultRolloverStrategy max="3"/>
    </RollingFile>
  </Appenders>
  <Loggers>
    <Root level="INFO"><AppenderRef ref="SERVER"/></Root>
    <Logger name="kafka.request.logger" level="WARN"/>
    <Logger name="org.apache.kafka.controller" level="INFO"/>
    <Logger name="kafka.log.LogCleaner" level="WARN"/>
  </Loggers>
</Configuration>
EOF
}

new_cluster_id() {
  # A Kafka Uuid: 16 random bytes, URL-safe base64 without padding (22 chars),
  # not starting with '-' (the CLI would read it as an option).
  local id
  while :; do
    id="$(head -c 16 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n')"
    [[ "$id" != -* && ${#id} == 22 ]] && break
  done
  echo "$id"
}

format_storage() {
  if [[ -f "$DATA_DIR/meta.properties" ]]; then
    return 0
  fi
  local id
  if [[ "$CLUSTER" == 1 ]]; then
    id="$(cluster_shared_id)"
  else
    id="$(new_cluster_id)"
  fi
  log "formatting $DATA_DIR (cluster id $id)"
  local -a extra=()
  # The secure broker's SCRAM users exist from the first start: the
  # inter-broker listener authenticates with them.
  [[ "$SECURE" == 1 ]] && extra=("${SCRAM_FORMAT_ARGS[@]}")
  if ! run_tool kafka.tools.StorageTool format -t "$id" -c "$CONF_FILE" --ignore-formatted "${extra[@]}" >"$LOG_DIR/format.log" 2>&1; then
    cat "$LOG_DIR/format.log" >&2
    die "storage format failed"
  fi
}

# AppCDS (class data sharing): the first start records the loaded classes
# into an archive that the JVM writes when the broker exits cleanly (stop);
# later starts map it and need ~40% less CPU to become ready. The archive is
# keyed on the jar set and the exact JVM; a stale one is ignored by the JVM.
CDS_FLAGS=()
cds_setup() {
  CDS_FLAGS=()
  rm -f "$CDS_PENDING"
  [[ "${KAFKA_CDS:-1}" == 1 ]] || return 0
  local key archive
  key="$(printf '%s\n%s\n%s\n' "$(pom_hash)" "$JAVA_ID" "$LIBS_DIR" | sha256sum | cut -c1-16)"
  archive="$CDS_DIR/kafka-$key.jsa"
  if [[ -s "$archive" ]]; then
    CDS_FLAGS=("-XX:SharedArchiveFile=$archive")
  elif [[ "$SECURE" == 1 || ("$CLUSTER" == 1 && "$NODE_ID" != 1) ]]; then
    # Only the plain broker and cluster node 1 record the archive: two
    # brokers writing it at once would race. The others use it once it exists.
    return 0
  else
    mkdir -p "$CDS_DIR"
    rm -f "$CDS_DIR"/kafka-*.jsa*
    CDS_FLAGS=("-XX:ArchiveClassesAtExit=$archive.tmp.$$")
    printf '%s\n%s\n' "$archive.tmp.$$" "$archive" >"$CDS_PENDING"
  fi
  CDS_FLAGS+=("-Xlog:cds*=off")
}

# Called after a clean broker exit: keep the archive the JVM just wrote.
cds_finish() {
  [[ -f "$CDS_PENDING" ]] || return 0
  local tmp archive
  { read -r tmp && read -r archive; } <"$CDS_PENDING" || true
  rm -f "$CDS_PENDING"
  [[ -n "${tmp:-}" && -n "${archive:-}" ]] || return 0
  if [[ "${1:-}" == clean && -s "$tmp" ]]; then
    mv -f "$tmp" "$archive"
    log "saved class-data-sharing archive for faster starts ($(du -h "$archive" | cut -f1))"
  else
    rm -f "$tmp"
  fi
}

# ---------------------------------------------------------------- commands

cmd_start() {
  local pid
  if pid="$(running_pid)"; then
    log "broker already running from this script (pid $pid) on $BOOTSTRAP"
    return 0
  fi
  check_ports_free
  launch_broker
  await_broker "$LAUNCHED_PID"
}

# check_ports_free fails when another process listens on the broker's ports.
check_ports_free() {
  rm -f "$PID_FILE"
  local p
  for p in "$PORT" "$CONTROLLER_PORT"; do
    if port_in_use "$p"; then
      die "port $HOST:$p is already in use by another process (not a broker started by this script); stop it or set KAFKA_PORT / KAFKA_CONTROLLER_PORT"
    fi
  done
}

# launch_broker writes the configuration, formats the storage on the first
# start and starts the broker in the background; its pid is LAUNCHED_PID.
LAUNCHED_PID=""
launch_broker() {
  local pid
  cache_ok || cmd_fetch
  find_java
  maybe_install_kcat
  write_config
  format_storage
  cds_setup

  local -a java_cmd
  # shellcheck disable=SC2206 # KAFKA_HEAP is a list of flags on purpose
  java_cmd=("$JAVA" $HEAP "${JVM_OPTS[@]}" "${EXTRA_JVM_OPTS[@]}" "${CDS_FLAGS[@]}"
    "-Xlog:gc*:file=$LOG_DIR/gc.log:time,tags:filecount=3,filesize=10M"
    "-Dlog4j2.configurationFile=$LOG4J_FILE" "-Dkafka.logs.dir=$LOG_DIR"
    -cp "$(classpath)" kafka.Kafka "$CONF_FILE")
  printf '%q ' "${java_cmd[@]}" >"$RUN_DIR/java-command.txt"
  echo >>"$RUN_DIR/java-command.txt"

  # Fresh logs per run (the previous run's server.log is kept as server.log.prev).
  rm -f "$LOG_DIR"/server.log.*
  [[ -f "$SERVER_LOG" ]] && mv "$SERVER_LOG" "$SERVER_LOG.prev"
  : >"$OUT_LOG"
  # New session so the broker outlives the calling shell's process group.
  if command -v setsid >/dev/null 2>&1; then
    setsid "${java_cmd[@]}" </dev/null >>"$OUT_LOG" 2>&1 &
  else
    nohup "${java_cmd[@]}" </dev/null >>"$OUT_LOG" 2>&1 &
  fi
  pid=$!
  echo "$pid" >"$PID_FILE"
  LAUNCHED_PID="$pid"
}

# await_broker waits until the broker $1 answers, or kills it and fails
# after START_TIMEOUT seconds.
await_broker() {
  local pid="$1"
  local start=$SECONDS
  while :; do
    if ! kill -0 "$pid" 2>/dev/null; then
      rm -f "$PID_FILE"
      cds_finish failed
      tail_log
      die "broker process $pid exited during startup"
    fi
    # Probe only once the listener accepts connections (kcat would otherwise
    # spend its whole metadata timeout retrying a refused connection).
    if port_in_use "$PORT" &&
      { command -v kcat >/dev/null 2>&1 || broker_started_line; } &&
      probe_metadata; then
      break
    fi
    if ((SECONDS - start >= START_TIMEOUT)); then
      tail_log
      kill -TERM "$pid" 2>/dev/null || true
      sleep 2
      kill -KILL "$pid" 2>/dev/null || true
      rm -f "$PID_FILE"
      cds_finish failed
      die "broker did not answer a metadata request on $BOOTSTRAP within ${START_TIMEOUT}s"
    fi
    sleep 0.5
  done
  echo "$(kafka_version) ready on $BOOTSTRAP (pid $pid, logs: $LOG_DIR, started in $((SECONDS - start))s)"
}

cmd_stop() {
  local pid
  if ! pid="$(running_pid)"; then
    rm -f "$PID_FILE"
    log "broker not running"
    return 0
  fi
  log "stopping broker (pid $pid)"
  kill -TERM "$pid" 2>/dev/null || true
  local waited=0 how=clean
  while kill -0 "$pid" 2>/dev/null; do
    if ((waited >= STOP_TIMEOUT * 10)); then
      log "broker did not stop within ${STOP_TIMEOUT}s, sending SIGKILL"
      kill -KILL "$pid" 2>/dev/null || true
      how=killed
      sleep 0.5
      break
    fi
    sleep 0.1
    waited=$((waited + 1))
  done
  rm -f "$PID_FILE"
  cds_finish "$how"
  log "broker stopped"
}

cmd_status() {
  local pid
  if pid="$(running_pid)"; then
    if probe_metadata; then
      echo "running: $(kafka_version) on $BOOTSTRAP (pid $pid, logs: $LOG_DIR)"
    else
      echo "running but not answering on $BOOTSTRAP yet (pid $pid, logs: $LOG_DIR)"
    fi
    return 0
  fi
  echo "not running ($(kafka_version), run dir: $RUN_DIR)"
  return 3
}

cmd_clean() {
  cmd_stop
  rm -rf "$RUN_DIR"
  rm -rf "$CACHE_DIR"/libs.tmp.*
  log "removed $RUN_DIR (jar cache kept in $LIBS_DIR)"
}

# ---------------------------------------------------------------- secure broker
#
# A second broker, separate from the plain one (own run dir, own ports), set
# up the way a production cluster is: clients reach it only over SASL_SSL
# (TLS with a certificate this script issues from its own CA; SCRAM-SHA-256,
# SCRAM-SHA-512, PLAIN and unsecured-JWT OAUTHBEARER), and every request is
# checked by the StandardAuthorizer with allow.everyone.if.no.acl.found=false.
# User:admin is the only super user besides the broker itself, which talks
# to its controller over mutual TLS. Tests create their own users and ACLs
# through admin; `secure-env` prints what they need.

SECURE=0
TLS_DIR=""
CRED_FILE=""
CLIENT_PROPS=""
ADMIN_PASSWORD=""
PLAIN_PASSWORD=""
SCRAM_FORMAT_ARGS=()
# The broker's certificate subject. It is the principal of the broker's own
# requests on the controller listener (mutual TLS), hence a super user.
BROKER_DN="CN=cohortgate-secure-broker"

use_secure() {
  SECURE=1
  set_run_dir "${KAFKA_SECURE_RUN_DIR:-$CACHE_DIR/run-secure}"
  PORT="${KAFKA_SECURE_PORT:-9094}"
  CONTROLLER_PORT="${KAFKA_SECURE_CONTROLLER_PORT:-9095}"
  BOOTSTRAP="$HOST:$PORT"
  TLS_DIR="$RUN_DIR/tls"
  CRED_FILE="$RUN_DIR/credentials"
  CLIENT_PROPS="$RUN_DIR/admin-client.properties"
  if [[ -s "$CRED_FILE" ]]; then
    load_credentials
  fi
}

# A random password of URL-safe characters: no quoting needed anywhere.
new_password() { head -c 18 /dev/urandom | base64 | tr '+/' '-_' | tr -d '=\n'; }

# Credentials are made once per run dir and kept, like the data: the SCRAM
# users live in the metadata log formatted with them.
load_credentials() {
  if [[ ! -s "$CRED_FILE" ]]; then
    mkdir -p "$RUN_DIR"
    (umask 077 && printf 'ADMIN_PASSWORD=%s\nPLAIN_PASSWORD=%s\n' "$(new_password)" "$(new_password)" >"$CRED_FILE")
  fi
  ADMIN_PASSWORD="$(sed -n 's/^ADMIN_PASSWORD=//p' "$CRED_FILE")"
  PLAIN_PASSWORD="$(sed -n 's/^PLAIN_PASSWORD=//p' "$CRED_FILE")"
  [[ -n "$ADMIN_PASSWORD" && -n "$PLAIN_PASSWORD" ]] || die "$CRED_FILE is damaged; run clean-secure"
  SCRAM_FORMAT_ARGS=(
    --add-scram "SCRAM-SHA-512=[name=admin,password=$ADMIN_PASSWORD]"
    --add-scram "SCRAM-SHA-256=[name=admin,password=$ADMIN_PASSWORD]"
  )
}

# Issues, once, a CA and from it the broker's certificate (SANs 127.0.0.1
# and localhost, for server and client auth) and a client certificate for
# tests of --kafka-tls-cert/--kafka-tls-key. Keys are unencrypted PKCS#8;
# Kafka reads key and chain as a PEM key store.
make_certificates() {
  [[ -s "$TLS_DIR/broker-keystore.pem" && -s "$TLS_DIR/client-key.pem" ]] && return 0
  command -v openssl >/dev/null 2>&1 || die "openssl not found (apt-get install -y openssl)"
  log "issuing a test CA and certificates in $TLS_DIR"
  rm -rf "$TLS_DIR"
  mkdir -p "$TLS_DIR"
  (
    cd "$TLS_DIR"
    umask 077
    openssl req -x509 -newkey rsa:2048 -nodes -sha256 -days 3650 \
      -keyout ca-key.pem -out ca.pem -subj "/CN=cohortgate test CA" \
      -addext "basicConstraints=critical,CA:TRUE" -addext "keyUsage=critical,keyCertSign,cRLSign" 2>/dev/null
    openssl req -newkey rsa:2048 -nodes -keyout broker-key.pem -out broker.csr -subj "/$BROKER_DN" 2>/dev/null
    printf '%s\n' "subjectAltName=IP:127.0.0.1,DNS:localhost" "extendedKeyUsage=serverAuth,clientAuth" \
      "basicConstraints=CA:FALSE" "keyUsage=digitalSignature,keyEncipherment" >broker.ext
    openssl x509 -req -in broker.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 3650 -sha256 \
      -extfile broker.ext -out broker.pem 2>/dev/null
    cat broker-key.pem broker.pem ca.pem >broker-keystore.pem
    openssl req -newkey rsa:2048 -nodes -keyout client-key.pem -out client.csr -subj "/CN=cohortgate-test-client" 2>/dev/null
    printf '%s\n' "extendedKeyUsage=clientAuth" "basicConstraints=CA:FALSE" >client.ext
    openssl x509 -req -in client.csr -CA ca.pem -CAkey ca-key.pem -CAcreateserial -days 3650 -sha256 \
      -extfile client.ext -out client.pem 2>/dev/null
    rm -f ./*.csr ./*.ext ./*.srl
    chmod 644 ca.pem broker.pem client.pem
  ) || die "openssl failed to issue the test certificates"
}

write_secure_config() {
  local scram="org.apache.kafka.common.security.scram.ScramLoginModule"
  local plain="org.apache.kafka.common.security.plain.PlainLoginModule"
  local oauth="org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule"
  (umask 077 && cat >"$CONF_FILE" <<EOF
# Generated by integration/kafka/kafka.sh start-secure - single node KRaft
# (combined mode) with a SASL_SSL client listener and an ACL authorizer.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@$HOST:$CONTROLLER_PORT
listeners=SASL_SSL://$HOST:$PORT,CONTROLLER://$HOST:$CONTROLLER_PORT
advertised.listeners=SASL_SSL://$HOST:$PORT
controller.listener.names=CONTROLLER
inter.broker.listener.name=SASL_SSL
listener.security.protocol.map=CONTROLLER:SSL,SASL_SSL:SASL_SSL
log.dirs=$DATA_DIR

# TLS: a PEM key store (key and chain) and trust store (the test CA).
ssl.keystore.type=PEM
ssl.keystore.location=$TLS_DIR/broker-keystore.pem
ssl.truststore.type=PEM
ssl.truststore.location=$TLS_DIR/ca.pem
ssl.endpoint.identification.algorithm=https
# Clients may present a certificate (--kafka-tls-cert); SASL names them.
listener.name.sasl_ssl.ssl.client.auth=requested
# The controller listener admits only holders of a certificate of the CA.
listener.name.controller.ssl.client.auth=required

# SASL on the client listener. SCRAM users live in the metadata log
# (created at format time and with the admin API); PLAIN users are static.
sasl.enabled.mechanisms=SCRAM-SHA-512,SCRAM-SHA-256,PLAIN,OAUTHBEARER
sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512
listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=$scram required username="admin" password="$ADMIN_PASSWORD";
listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config=$scram required;
listener.name.sasl_ssl.plain.sasl.jaas.config=$plain required username="admin" password="$ADMIN_PASSWORD" user_admin="$ADMIN_PASSWORD" user_plain-user="$PLAIN_PASSWORD";
# OAUTHBEARER with Kafka's unsecured JWT validator: for tests only.
listener.name.sasl_ssl.oauthbearer.sasl.jaas.config=$oauth required unsecuredLoginStringClaim_sub="admin";

# Authorization: nothing is allowed without an ACL.
authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer
allow.everyone.if.no.acl.found=false
super.users=User:admin;User:$BROKER_DN

$(single_node_settings)
EOF
  )
  (umask 077 && cat >"$CLIENT_PROPS" <<EOF
# Admin (super user) settings for the Kafka command-line tools, e.g.
#   java -cp 'integration/kafka/.cache/libs/*' org.apache.kafka.tools.AclCommand \\
#     --bootstrap-server $BOOTSTRAP --command-config $CLIENT_PROPS --list
security.protocol=SASL_SSL
sasl.mechanism=SCRAM-SHA-512
sasl.jaas.config=$scram required username="admin" password="$ADMIN_PASSWORD";
ssl.truststore.type=PEM
ssl.truststore.location=$TLS_DIR/ca.pem
default.api.timeout.ms=15000
request.timeout.ms=10000
EOF
  )
}

# kcat asks as admin with PLAIN: Debian's kcat (librdkafka 2.0.2) fails
# SCRAM against Kafka 4 ("invalid credentials") where Java and franz-go
# clients succeed.
probe_secure_metadata() {
  if command -v kcat >/dev/null 2>&1; then
    kcat -L -b "$BOOTSTRAP" -m 5 -X security.protocol=SASL_SSL -X sasl.mechanisms=PLAIN \
      -X sasl.username=admin -X "sasl.password=$ADMIN_PASSWORD" -X "ssl.ca.location=$TLS_DIR/ca.pem" \
      2>/dev/null | grep -q ' 1 brokers:'
  else
    run_tool org.apache.kafka.tools.TopicCommand --bootstrap-server "$BOOTSTRAP" --list \
      --command-config "$CLIENT_PROPS" >/dev/null 2>&1
  fi
}

# The secure broker's data is throwaway: each start formats it afresh, with
# the SCRAM users bootstrapped again. Restarted over its old data, Kafka
# 4.4 replayed the admin's SCRAM credential and still refused it ("invalid
# credentials"), which failed every security test after a stop and start.
cmd_start_secure() {
  load_credentials
  make_certificates
  if ! running_pid >/dev/null; then
    rm -rf "$DATA_DIR"
  fi
  cmd_start
  log "for the security tests: eval \"\$(bash ${BASH_SOURCE[0]} secure-env)\""
}

# Prints, as shell assignments, what the security tests (and a client)
# need:  eval "$(bash integration/kafka/kafka.sh secure-env)"
cmd_secure_env() {
  [[ -s "$CRED_FILE" && -s "$TLS_DIR/ca.pem" ]] || die "no secure broker set up in $RUN_DIR; run start-secure first"
  load_credentials
  printf 'export KAFKA_SECURE_BROKERS=%q\n' "$BOOTSTRAP"
  printf 'export KAFKA_SECURE_CA=%q\n' "$TLS_DIR/ca.pem"
  printf 'export KAFKA_SECURE_CLIENT_CERT=%q\n' "$TLS_DIR/client.pem"
  printf 'export KAFKA_SECURE_CLIENT_KEY=%q\n' "$TLS_DIR/client-key.pem"
  printf 'export KAFKA_SECURE_ADMIN_USER=admin\n'
  printf 'export KAFKA_SECURE_ADMIN_PASSWORD=%q\n' "$ADMIN_PASSWORD"
  printf 'export KAFKA_SECURE_PLAIN_USER=plain-user\n'
  printf 'export KAFKA_SECURE_PLAIN_PASSWORD=%q\n' "$PLAIN_PASSWORD"
}

# ---------------------------------------------------------------- cluster
#
# Three brokers on loopback, each a KRaft node in combined mode (broker and
# controller), with a static controller quorum of all three: losing one
# node loses neither the quorum nor a partition (replication factor 3,
# min.insync.replicas 2); losing two stops writes until one returns. Each
# node has its own run dir (.cache/run-cluster/N) and ports (client
# KAFKA_CLUSTER_PORT+N-1, controller KAFKA_CLUSTER_CONTROLLER_PORT+N-1);
# the nodes share the cluster id in .cache/run-cluster/cluster.id. The
# chaos harness (integration/chaos --cluster) kills, pauses and restarts them one
# by one with the *-broker commands.

CLUSTER=0
NODE_ID=1
CLUSTER_NODES=(1 2 3)
CLUSTER_ROOT="${KAFKA_CLUSTER_RUN_DIR:-$CACHE_DIR/run-cluster}"
CLUSTER_PORT="${KAFKA_CLUSTER_PORT:-29092}"
CLUSTER_CONTROLLER_PORT="${KAFKA_CLUSTER_CONTROLLER_PORT:-29192}"

# use_cluster_node points the script's per-broker settings at node $1.
use_cluster_node() {
  local n="$1"
  [[ "$n" =~ ^[1-3]$ ]] || die "broker number '$n': want 1, 2 or 3"
  CLUSTER=1
  NODE_ID="$n"
  LOG_TAG=" [node $n]"
  set_run_dir "$CLUSTER_ROOT/$n"
  PORT=$((CLUSTER_PORT + n - 1))
  CONTROLLER_PORT=$((CLUSTER_CONTROLLER_PORT + n - 1))
  BOOTSTRAP="$HOST:$PORT"
  HEAP="${KAFKA_CLUSTER_HEAP:--Xms128m -Xmx384m}"
  # The C1 compiler alone: a node restarted under load (the chaos
  # scenarios) is ready sooner, and three JVMs compiling at once leave the
  # machine's few cores to the processors; a test cluster's throughput
  # does not need C2.
  EXTRA_JVM_OPTS=(-XX:TieredStopAtLevel=1)
  START_TIMEOUT="${KAFKA_START_TIMEOUT:-180}"
}

cluster_bootstrap() {
  local n out=()
  for n in "${CLUSTER_NODES[@]}"; do out+=("$HOST:$((CLUSTER_PORT + n - 1))"); done
  (IFS=, && echo "${out[*]}")
}

# The nodes must be formatted with one cluster id.
cluster_shared_id() {
  local f="$CLUSTER_ROOT/cluster.id"
  if [[ ! -s "$f" ]]; then
    mkdir -p "$CLUSTER_ROOT"
    new_cluster_id >"$f"
  fi
  cat "$f"
}

write_cluster_config() {
  local voters="" n
  for n in "${CLUSTER_NODES[@]}"; do
    voters+="${voters:+,}$n@$HOST:$((CLUSTER_CONTROLLER_PORT + n - 1))"
  done
  cat >"$CONF_FILE" <<EOF
# Generated by integration/kafka/kafka.sh start-cluster - node $NODE_ID of a
# three-node KRaft cluster (combined mode, static controller quorum).
process.roles=broker,controller
node.id=$NODE_ID
controller.quorum.voters=$voters
listeners=PLAINTEXT://$HOST:$PORT,CONTROLLER://$HOST:$CONTROLLER_PORT
advertised.listeners=PLAINTEXT://$HOST:$PORT
controller.listener.names=CONTROLLER
inter.broker.listener.name=PLAINTEXT
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT
log.dirs=$DATA_DIR

auto.create.topics.enable=false
group.initial.rebalance.delay.ms=0
# What a production cluster runs with: every write acknowledged by two of
# three replicas, and no unclean leader (a replica that missed writes).
default.replication.factor=3
min.insync.replicas=2
unclean.leader.election.enable=false
offsets.topic.replication.factor=3
offsets.topic.num.partitions=3
transaction.state.log.replication.factor=3
transaction.state.log.min.isr=2
transaction.state.log.num.partitions=3
share.coordinator.state.topic.replication.factor=3
share.coordinator.state.topic.min.isr=2
# A stopped follower leaves the ISR after 10s (default 30s) and a silent
# broker is fenced after 6s (default 9s), so that the chaos scenarios that
# pause a broker past both stay short.
replica.lag.time.max.ms=10000
broker.session.timeout.ms=6000

num.network.threads=2
num.io.threads=2
num.replica.fetchers=1
num.recovery.threads.per.data.dir=1
EOF
}

# A cluster node is up once it logged its start (a KRaft broker does so
# only after the controller unfenced it) and, with kcat, answers metadata.
probe_cluster_node() {
  broker_started_line || return 1
  command -v kcat >/dev/null 2>&1 || return 0
  kcat -L -b "$BOOTSTRAP" -m 5 2>/dev/null | grep -q ' brokers:'
}

cmd_start_cluster() {
  local n pid
  local -A pids=()
  # Launch all three before waiting for any: one node alone has no
  # controller quorum and cannot become ready.
  for n in "${CLUSTER_NODES[@]}"; do
    use_cluster_node "$n"
    if pid="$(running_pid)"; then
      log "already running (pid $pid)"
      pids[$n]="$pid"
      continue
    fi
    check_ports_free
    launch_broker
    pids[$n]="$LAUNCHED_PID"
  done
  for n in "${CLUSTER_NODES[@]}"; do
    if ! (use_cluster_node "$n" && await_broker "${pids[$n]}"); then
      cmd_stop_cluster
      die "cluster did not start"
    fi
  done
  echo "cluster ready: $(cluster_bootstrap)"
}

cmd_stop_cluster() {
  local n pid
  # SIGTERM to all at once, so that none waits for a controller that is
  # itself shutting down; then each is waited for (SIGKILL after
  # KAFKA_STOP_TIMEOUT). A paused node is continued first.
  for n in "${CLUSTER_NODES[@]}"; do
    use_cluster_node "$n"
    if pid="$(running_pid)"; then
      kill -CONT "$pid" 2>/dev/null || true
      kill -TERM "$pid" 2>/dev/null || true
    fi
  done
  for n in "${CLUSTER_NODES[@]}"; do
    (use_cluster_node "$n" && cmd_stop)
  done
}

cmd_status_cluster() {
  local n pid state rc=0 up=0
  for n in "${CLUSTER_NODES[@]}"; do
    use_cluster_node "$n"
    if pid="$(running_pid)"; then
      state="$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null || true)"
      if [[ "$state" == T ]]; then
        echo "node $n: paused (pid $pid) on $BOOTSTRAP"
      else
        echo "node $n: running (pid $pid) on $BOOTSTRAP"
        up=$((up + 1))
      fi
    else
      echo "node $n: not running (run dir $RUN_DIR)"
      rc=3
    fi
  done
  echo "$up of ${#CLUSTER_NODES[@]} nodes running: $(cluster_bootstrap)"
  return "$rc"
}

# The *-broker commands act on one node, N = 1..3.
node_pid() {
  local pid
  pid="$(running_pid)" || die "not running"
  echo "$pid"
}

cmd_kill_broker() {
  local pid i
  pid="$(node_pid)"
  kill -KILL "$pid"
  for ((i = 0; i < 100; i++)); do
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.1
  done
  if kill -0 "$pid" 2>/dev/null; then
    die "pid $pid survived SIGKILL for 10s"
  fi
  rm -f "$PID_FILE"
  cds_finish killed
  log "killed (kill -9 pid $pid)"
}

cmd_pause_broker() {
  local pid
  pid="$(node_pid)"
  kill -STOP "$pid"
  log "paused (SIGSTOP pid $pid)"
}

cmd_resume_broker() {
  local pid
  pid="$(node_pid)"
  kill -CONT "$pid"
  log "resumed (SIGCONT pid $pid)"
}

# restart-broker starts a node that is not running over its data again
# (after kill-broker or stop-broker) and waits until it is up; a running
# node is left alone.
cmd_restart_broker() {
  [[ -f "$DATA_DIR/meta.properties" ]] || die "no data in $DATA_DIR: start the cluster with start-cluster"
  cmd_start
}

usage() {
  sed -n '2,/^set -euo pipefail/{/^set /d;p}' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
}

main() {
  local cmd="${1:-}"
  case "$cmd" in
    *-secure | secure-env) use_secure ;;
  esac
  case "$cmd" in
    fetch) cmd_fetch ;;
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    version) cmd_version ;;
    clean) cmd_clean ;;
    start-cluster) cmd_start_cluster ;;
    stop-cluster) cmd_stop_cluster ;;
    status-cluster) cmd_status_cluster ;;
    clean-cluster) cmd_stop_cluster && rm -rf "$CLUSTER_ROOT" && log "removed $CLUSTER_ROOT" ;;
    kill-broker | pause-broker | resume-broker | stop-broker | restart-broker)
      [[ $# == 2 ]] || die "usage: kafka.sh $cmd N (N = 1, 2 or 3)"
      use_cluster_node "$2"
      case "$cmd" in
        kill-broker) cmd_kill_broker ;;
        pause-broker) cmd_pause_broker ;;
        resume-broker) cmd_resume_broker ;;
        stop-broker) cmd_stop ;;
        restart-broker) cmd_restart_broker ;;
      esac
      ;;
    start-secure) cmd_start_secure ;;
    stop-secure) cmd_stop ;;
    status-secure) cmd_status ;;
    clean-secure) cmd_clean ;;
    secure-env) cmd_secure_env ;;
    -h | --help | help) usage ;;
    *)
      usage >&2
      exit 2
      ;;
  esac
}

main "$@"
