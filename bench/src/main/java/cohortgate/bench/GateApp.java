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

        Topology topology = topology(commands, signals, output);
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
                .toTable(Materialized.<Bytes, String, org.apache.kafka.streams.state.KeyValueStore<Bytes, byte[]>>as("membership")
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
                + "               [--guarantee=exactly_once_v2|at_least_once]";
    }
}
