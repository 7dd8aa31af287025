#!/usr/bin/env bash
# Runs the example producers (python, java, or both: the arguments) against
# `bin/processor try` (its embedded broker), and checks that the receipt
# of each leave reaches the changelog: `processor status --brokers` must
# show the request_id the example sent. Called by `make examples`; needs
# bin/processor, python3 with confluent-kafka, and for java a JDK and Maven.
#
# The embedded broker listens on EXAMPLES_KAFKA (default 127.0.0.1:19092,
# not 9092, so that the check runs beside an Apache Kafka broker on the
# usual port), the processor's HTTP on EXAMPLES_HTTP and its membership
# API on EXAMPLES_API (`make examples` passes its variables of those names).
set -euo pipefail
cd "$(dirname "$0")/.."

KAFKA=${EXAMPLES_KAFKA:-127.0.0.1:19092}
HTTP=${EXAMPLES_HTTP:-127.0.0.1:18080}
API=${EXAMPLES_API:-127.0.0.1:18081}
data=$(mktemp -d)
bin/processor try --embedded-addr "$KAFKA" --http-addr "$HTTP" --api-addr "$API" --data-dir "$data" --grace 100ms --log-level warn 2>"$data/log" &
pid=$!
trap 'kill "$pid" 2>/dev/null; wait "$pid" 2>/dev/null || true; rm -rf "$data"' EXIT

# Ready: /readyz answers 200 within 60 s, or the processor's log says why not.
for i in $(seq 600); do
	if curl -fsS "http://$HTTP/readyz" >/dev/null 2>&1; then
		break
	fi
	if ! kill -0 "$pid" 2>/dev/null || [ "$i" = 600 ]; then
		echo "processor not ready:" >&2
		cat "$data/log" >&2
		exit 1
	fi
	sleep 0.1
done

# receipt USER REQUEST_ID: waits up to 20 s for the user's changelog record
# to follow the command with REQUEST_ID.
receipt() {
	local out
	for _ in $(seq 100); do
		out=$(bin/processor status --brokers "$KAFKA" --user "$1")
		if grep -q "\"request_id\": \"$2\"" <<<"$out"; then
			printf 'receipt on the changelog:\n%s\n' "$out"
			return 0
		fi
		sleep 0.2
	done
	printf 'no receipt for request_id %s of user %s; the latest record:\n%s\n' "$2" "$1" "$out" >&2
	cat "$data/log" >&2
	return 1
}

langs=("$@")
[ "${#langs[@]}" -gt 0 ] || langs=(python java)
for l in "${langs[@]}"; do
	case "$l" in
	python)
		echo "== examples/python/leave.py"
		python3 examples/python/leave.py --brokers "$KAFKA" --user 4242 --request-id example-python
		receipt 4242 example-python
		;;
	java)
		echo "== examples/java (kafka-clients)"
		mvn -q -B -Dstyle.color=never -f examples/java/pom.xml package
		java -jar examples/java/target/leave.jar "$KAFKA" 4343 example-java
		receipt 4343 example-java
		;;
	*)
		echo "unknown example $l; want python or java" >&2
		exit 2
		;;
	esac
done

# Each example placed its leave where Kafka's default partitioner does: the
# processor re-published none of them (the counter has a series per topic
# once it counts one).
misrouted=$(curl -fsS "http://$HTTP/metrics" | awk '/^cohortgate_misrouted_records_total[{ ]/ {n += $NF} END {print n + 0}')
if [ "$misrouted" != 0 ]; then
	echo "cohortgate_misrouted_records_total is $misrouted, want 0: an example used the wrong partitioner" >&2
	exit 1
fi
echo "no record misrouted"
