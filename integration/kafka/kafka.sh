#!/usr/bin/env bash
# Runs a real single-node Apache Kafka broker (KRaft combined mode) for the
# integration tests. The broker jars come from Maven (see pom.xml) and are
# cached in .cache/libs next to this script; nothing downloaded is committed.
#
# Usage: kafka.sh fetch|start|stop|status|version|clean
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
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
POM="$SCRIPT_DIR/pom.xml"
CACHE_DIR="${KAFKA_CACHE_DIR:-$SCRIPT_DIR/.cache}"
LIBS_DIR="$CACHE_DIR/libs"
STAMP_FILE="$LIBS_DIR/.fetched"
RUN_DIR="${KAFKA_RUN_DIR:-$CACHE_DIR/run}"
DATA_DIR="$RUN_DIR/data"
LOG_DIR="$RUN_DIR/logs"
CONF_FILE="$RUN_DIR/server.properties"
LOG4J_FILE="$RUN_DIR/log4j2.xml"
TOOLS_LOG4J_FILE="$RUN_DIR/tools-log4j2.xml"
PID_FILE="$RUN_DIR/kafka.pid"
CDS_DIR="$CACHE_DIR/cds"
CDS_PENDING="$RUN_DIR/cds-pending"
SERVER_LOG="$LOG_DIR/server.log"
OUT_LOG="$LOG_DIR/kafka.out"

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

log() { printf 'kafka.sh: %s\n' "$*" >&2; }
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
  id="$(new_cluster_id)"
  log "formatting $DATA_DIR (cluster id $id)"
  if ! run_tool kafka.tools.StorageTool format -t "$id" -c "$CONF_FILE" --ignore-formatted >"$LOG_DIR/format.log" 2>&1; then
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
  rm -f "$PID_FILE"
  local p
  for p in "$PORT" "$CONTROLLER_PORT"; do
    if port_in_use "$p"; then
      die "port $HOST:$p is already in use by another process (not a broker started by this script); stop it or set KAFKA_PORT / KAFKA_CONTROLLER_PORT"
    fi
  done

  cache_ok || cmd_fetch
  find_java
  maybe_install_kcat
  write_config
  format_storage
  cds_setup

  local -a java_cmd
  # shellcheck disable=SC2206 # KAFKA_HEAP is a list of flags on purpose
  java_cmd=("$JAVA" $HEAP "${JVM_OPTS[@]}" "${CDS_FLAGS[@]}"
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

usage() {
  sed -n '2,18p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
}

main() {
  local cmd="${1:-}"
  case "$cmd" in
    fetch) cmd_fetch ;;
    start) cmd_start ;;
    stop) cmd_stop ;;
    status) cmd_status ;;
    version) cmd_version ;;
    clean) cmd_clean ;;
    -h | --help | help) usage ;;
    *)
      usage >&2
      exit 2
      ;;
  esac
}

main "$@"
