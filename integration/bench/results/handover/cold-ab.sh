#!/bin/bash
# A/B: an instance with an empty data dir takes over every partition of a
# kept bench-instances group; time from start to /readyz 200, CPU, peak RSS.
# usage: KAFKA_BROKERS=host:port cold-ab.sh GROUP ROUNDS BIN_A BIN_B (GROUP: the
# name a `bench instances --keep --max 1 --runs 1` run printed and kept)
set -u
G=$1; ROUNDS=$2; shift 2
W=${AB_WORK:-bin/ab}/work-$G; mkdir -p $W
for r in $(seq 1 $ROUNDS); do
  for bin in "$@"; do
    name=$(basename $bin)-r$r; dir=$W/$name; rm -rf $dir; mkdir -p $dir
    port=$((20000 + RANDOM % 20000))
    start=$(date +%s.%N)
    $bin run --brokers ${KAFKA_BROKERS:-127.0.0.1:9092} --group $G --data-dir $dir --http-addr 127.0.0.1:$port \
      --transactional-id $G-ab-$name --exactly-once=true --grace 0 --commands-topic $G.commands \
      --dlq-topic $G.dlq --changelog-topic $G.changelog --signals-topic $G.signals --cohort-topic $G.cohort \
      > $W/$name.log 2>&1 &
    pid=$!
    ready=""
    for i in $(seq 1 3000); do
      if curl -sf -o /dev/null http://127.0.0.1:$port/readyz; then ready=$(date +%s.%N); break; fi
      sleep 0.05
    done
    hwm=$(grep VmHWM /proc/$pid/status | awk '{print $2}')
    cpu=$(awk '{print ($14+$15)/100}' /proc/$pid/stat)
    load=$(cut -d' ' -f1-3 /proc/loadavg)
    kill -TERM $pid; wait $pid
    took=$(echo "$ready - $start" | bc)
    echo "$name start→ready ${took}s cpu ${cpu}s peakRSS $((hwm/1024))MiB load $load"
  done
done
