package cohortgate.bench;

import java.time.Duration;
import java.util.HashMap;
import java.util.Map;
import java.util.Properties;
import java.util.concurrent.CountDownLatch;

import org.apache.kafka.common.serialization.Serdes;
import org.apache.kafka.common.utils.Bytes;
import org.apache.kafka.streams.KafkaStreams;
import org.apache.kafka.streams.StreamsBuilder;
import org.apache.kafka.streams.StreamsConfig;
import org.apache.kafka.streams.Topology;
import org.apache.kafka.streams.errors.StreamsUncaughtExceptionHandler;
import org.apache.kafka.streams.kstream.Consumed;
import org.apache.kafka.streams.kstream.Joined;
import org.apache.kafka.streams.kstream.KTable;
import org.apache.kafka.streams.kstream.Materialized;
import org.apache.kafka.streams.kstream.Produced;
import org.apache.kafka.streams.processor.TimestampExtractor;
import org.apache.kafka.streams.state.KeyValueStore;
import org.apache.kafka.streams.state.Stores;

/**
 * The Kafka Streams counterpart of the cohortgate processor, for benchmarks:
 * signals are forwarded unless their user's latest command is a leave.
 *
 * <p>The membership table is a KTable built from the commands topic (key: user
 * id, value: the op of the user's latest command). The signals stream is
 * left-joined against it: "leave" drops the signal, "rejoin" or no entry
 * forwards it unchanged (key, value, headers, timestamp). Both input topics
 * must be co-partitioned, as the join requires. Kafka Streams processes the
 * records of a task in timestamp order across its input partitions, so with
 * pre-loaded topics a signal meets the commands stamped before it; unlike
 * cohortgate it has no grace and no durable leave boundary.
 *
 * <p>With --grace-ms above 0 it is the variant with the same kind of
 * boundary as cohortgate (KIP-889/914/923): the table is a versioned KTable
 * whose versions are stamped with each command's at_ns, and the join waits
 * for the grace (Joined.withGracePeriod: the signals are buffered in a
 * RocksDB store with a changelog until stream time passes their timestamp
 * plus the grace) and then joins each signal against the table version as
 * of the signal's timestamp. A signal stamped inside a leave episode is
 * dropped, whatever order the two topics are read in, as long as the leave
 * arrives within the grace.
 *
 * <p>Flags are written --name=value; see {@link #usage()}.
 */
public final class GateApp {
    private GateApp() {}

    public static void main(String[] args) throws InterruptedException {
        Map<String, String> flags = parseFlags(args);
        String commands = flags.getOrDefault("commands-topic", "membership.commands");
        String signals = flags.getOrDefault("signals-topic", "engagement.signals");
        String output = flags.getOrDefault("output-topic", "cohort.signals");

        Properties props = new Properties();
        props.put(StreamsConfig.APPLICATION_ID_CONFIG, flags.getOrDefault("application-id", "cohortgate-streams-bench"));
        props.put(StreamsConfig.BOOTSTRAP_SERVERS_CONFIG, flags.getOrDefault("brokers", "127.0.0.1:9092"));
        props.put(StreamsConfig.PROCESSING_GUARANTEE_CONFIG, flags.getOrDefault("guarantee", StreamsConfig.EXACTLY_ONCE_V2));
        props.put(StreamsConfig.COMMIT_INTERVAL_MS_CONFIG, flags.getOrDefault("commit-interval-ms", "100"));
        props.put(StreamsConfig.NUM_STREAM_THREADS_CONFIG, flags.getOrDefault("threads", "1"));
        props.put(StreamsConfig.STATE_DIR_CONFIG, flags.getOrDefault("state-dir", System.getProperty("java.io.tmpdir") + "/cohortgate-streams-bench"));

        long graceMs = Long.parseLong(flags.getOrDefault("grace-ms", "0"));
        long historyMs = Long.parseLong(flags.getOrDefault("history-retention-ms", String.valueOf(defaultHistoryMs(graceMs))));
        Topology topology = graceMs > 0
                ? versionedTopology(commands, signals, output, Duration.ofMillis(graceMs), Duration.ofMillis(historyMs))
                : topology(commands, signals, output);
        System.err.println(topology.describe());
        KafkaStreams streams = new KafkaStreams(topology, props);
        CountDownLatch stopped = new CountDownLatch(1);
        streams.setStateListener((now, before) -> {
            System.err.println("cohortgate-streams: state " + before + " -> " + now);
            if (now == KafkaStreams.State.NOT_RUNNING || now == KafkaStreams.State.ERROR) {
                stopped.countDown();
            }
        });
        streams.setUncaughtExceptionHandler(e -> {
            System.err.println("cohortgate-streams: stream thread failed: " + e);
            return StreamsUncaughtExceptionHandler.StreamThreadExceptionResponse.SHUTDOWN_CLIENT;
        });
        Runtime.getRuntime().addShutdownHook(new Thread(() -> {
            streams.close(Duration.ofSeconds(20));
            stopped.countDown();
        }, "shutdown"));
        streams.start();
        stopped.await();
        if (streams.state() == KafkaStreams.State.ERROR) {
            System.exit(1);
        }
    }

    /** The topology: a membership KTable and the signals stream joined to it. */
    static Topology topology(String commands, String signals, String output) {
        StreamsBuilder builder = new StreamsBuilder();
        KTable<Bytes, String> membership = builder
                .stream(commands, Consumed.with(Serdes.Bytes(), Serdes.String()))
                .mapValues(Command::op)
                .filter((user, op) -> op != null) // not a command: the processor dead-letters it
                .toTable(Materialized.<Bytes, String, KeyValueStore<Bytes, byte[]>>as("membership")
                        .withKeySerde(Serdes.Bytes())
                        .withValueSerde(Serdes.String()));
        builder.stream(signals, Consumed.with(Serdes.Bytes(), Serdes.ByteArray()))
                .leftJoin(membership,
                        (signal, op) -> Command.LEAVE.equals(op) ? null : signal,
                        Joined.with(Serdes.Bytes(), Serdes.ByteArray(), Serdes.String()))
                .filter((user, signal) -> signal != null)
                .to(output, Produced.with(Serdes.Bytes(), Serdes.ByteArray()));
        return builder.build();
    }

    /**
     * The default history retention of the versioned table: the grace (Kafka
     * Streams refuses less) plus a minute. A signal is joined once stream
     * time is past its timestamp plus the grace, and the commands of its
     * task may be read ahead of the signals by the skew between the two
     * inputs; a version older than the table's stream time minus the
     * retention can no longer be read (the lookup finds nothing, and the
     * signal would be forwarded). The table holds one command per leave or
     * rejoin, so a longer retention costs little.
     */
    static long defaultHistoryMs(long graceMs) {
        return graceMs + 60_000L;
    }

    /**
     * The topology with the same kind of boundary as cohortgate: a versioned
     * membership table stamped with at_ns, and the signals joined to the
     * version as of their timestamp after the grace.
     */
    static Topology versionedTopology(String commands, String signals, String output, Duration grace, Duration history) {
        StreamsBuilder builder = new StreamsBuilder();
        TimestampExtractor boundary = (record, partitionTime) -> {
            long fallback = record.timestamp();
            return record.value() instanceof byte[] v ? Command.atMs(v, fallback) : fallback;
        };
        KTable<Bytes, String> membership = builder
                .stream(commands, Consumed.with(Serdes.Bytes(), Serdes.ByteArray()).withTimestampExtractor(boundary))
                .mapValues(v -> Command.op(v == null ? null : new String(v, java.nio.charset.StandardCharsets.UTF_8)))
                .filter((user, op) -> op != null) // not a command: the processor dead-letters it
                .toTable(Materialized.<Bytes, String>as(Stores.persistentVersionedKeyValueStore("membership", history))
                        .withKeySerde(Serdes.Bytes())
                        .withValueSerde(Serdes.String()));
        builder.stream(signals, Consumed.with(Serdes.Bytes(), Serdes.ByteArray()))
                .leftJoin(membership,
                        (signal, op) -> Command.LEAVE.equals(op) ? null : signal,
                        Joined.with(Serdes.Bytes(), Serdes.ByteArray(), Serdes.String()).withGracePeriod(grace))
                .filter((user, signal) -> signal != null)
                .to(output, Produced.with(Serdes.Bytes(), Serdes.ByteArray()));
        return builder.build();
    }

    static Map<String, String> parseFlags(String[] args) {
        Map<String, String> out = new HashMap<>();
        for (String a : args) {
            int eq = a.indexOf('=');
            if (!a.startsWith("--") || eq < 0) {
                System.err.println("cohortgate-streams: bad argument " + a + "\n" + usage());
                System.exit(2);
            }
            out.put(a.substring(2, eq), a.substring(eq + 1));
        }
        return out;
    }

    static String usage() {
        return "usage: GateApp --brokers=host:port --application-id=ID --commands-topic=T --signals-topic=T\n"
                + "               --output-topic=T [--state-dir=DIR] [--threads=1] [--commit-interval-ms=100]\n"
                + "               [--guarantee=exactly_once_v2|at_least_once]\n"
                + "               [--grace-ms=0 (0: plain KTable; above 0: versioned KTable, join with that grace)]\n"
                + "               [--history-retention-ms=grace+60000]";
    }
}
