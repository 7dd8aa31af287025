"""Publish a leave to cohortgate's commands topic with confluent-kafka.

    python3 leave.py --brokers 127.0.0.1:9092 --user 42 [--request-id r-1]

The key is the user id in decimal ASCII and the value the command JSON. The
one setting that matters is partitioner=murmur2_random: librdkafka's
default (consistent_random) hashes keys with CRC32, so its records land
where Kafka's default partitioner and the processor do not look for them;
the processor re-publishes such a record to the right partition, and the
leave counts only from then.

No at_ns: the record timestamp, stamped by the producer when it sends,
stands in for the boundary. Send at_ns only from the clock that stamps the
record: one more than 5 s ahead of the record timestamp is dead-lettered.
"""

import argparse
import json
import sys
import uuid

from confluent_kafka import Producer

MAX_USER_ID = 2**64 - 1


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--brokers", default="127.0.0.1:9092")
    ap.add_argument("--topic", default="membership.commands")
    ap.add_argument("--user", type=int, required=True, help="user id, 0..2^64-1")
    ap.add_argument("--request-id", default="", help="echoed into the changelog; default a random UUID")
    args = ap.parse_args()
    if not 0 <= args.user <= MAX_USER_ID:
        ap.error(f"--user {args.user}: want 0..{MAX_USER_ID}")
    request_id = args.request_id or str(uuid.uuid4())

    producer = Producer({
        "bootstrap.servers": args.brokers,
        "partitioner": "murmur2_random",  # Kafka's default partitioner, as the processor computes it
        "enable.idempotence": True,  # a retry never duplicates, acks=all
    })
    command = {"op": "leave", "user_id": args.user, "request_id": request_id}
    delivered = []
    producer.produce(
        args.topic,
        key=str(args.user).encode(),  # decimal ASCII, no sign or leading zero
        value=json.dumps(command, separators=(",", ":")).encode(),
        on_delivery=lambda err, msg: delivered.append((err, msg)),
    )
    if producer.flush(30) > 0 or not delivered:
        print(f"leave of user {args.user}: not acknowledged within 30s", file=sys.stderr)
        return 1
    err, msg = delivered[0]
    if err is not None:
        print(f"leave of user {args.user}: {err}", file=sys.stderr)
        return 1
    print(f"published leave of user {args.user} (request_id {request_id}) "
          f"to {msg.topic()} partition {msg.partition()} offset {msg.offset()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
