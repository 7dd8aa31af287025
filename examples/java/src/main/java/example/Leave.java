package example;

import java.util.Properties;
import java.util.UUID;
import java.util.concurrent.TimeUnit;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerConfig;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.clients.producer.RecordMetadata;
import org.apache.kafka.common.serialization.StringSerializer;

/**
 * Publishes a leave to cohortgate's commands topic with kafka-clients.
 *
 * <pre>java -jar target/leave.jar BROKERS USER_ID [REQUEST_ID]</pre>
 *
 * <p>The key is the user id in decimal ASCII and the value the command JSON.
 * No partitioner is set: Java's default hashes the key with murmur2, as the
 * processor does. No at_ns: the record timestamp, stamped by the producer
 * when it sends, stands in for the boundary.
 */
public final class Leave {
  public static void main(String[] args) throws Exception {
    if (args.length < 2 || args.length > 3) {
      System.err.println("usage: Leave BROKERS USER_ID [REQUEST_ID]");
      System.exit(2);
    }
    // 0..2^64-1, written back without sign or leading zero: one key per user.
    String user = Long.toUnsignedString(Long.parseUnsignedLong(args[1]));
    String requestId = args.length == 3 ? args[2] : UUID.randomUUID().toString();
    String topic = System.getenv().getOrDefault("COMMANDS_TOPIC", "membership.commands");
    String value = "{\"op\":\"leave\",\"user_id\":" + user + ",\"request_id\":" + quote(requestId) + "}";

    Properties props = new Properties();
    props.put(ProducerConfig.BOOTSTRAP_SERVERS_CONFIG, args[0]);
    props.put(ProducerConfig.ENABLE_IDEMPOTENCE_CONFIG, true); // a retry never duplicates, acks=all
    props.put(ProducerConfig.KEY_SERIALIZER_CLASS_CONFIG, StringSerializer.class);
    props.put(ProducerConfig.VALUE_SERIALIZER_CLASS_CONFIG, StringSerializer.class);
    try (KafkaProducer<String, String> producer = new KafkaProducer<>(props)) {
      RecordMetadata md = producer.send(new ProducerRecord<>(topic, user, value)).get(30, TimeUnit.SECONDS);
      System.out.printf("published leave of user %s (request_id %s) to %s partition %d offset %d%n",
          user, requestId, md.topic(), md.partition(), md.offset());
    }
  }

  /** A JSON string: quotes, backslashes and control characters escaped. */
  static String quote(String s) {
    StringBuilder b = new StringBuilder("\"");
    for (char c : s.toCharArray()) {
      if (c == '"' || c == '\\') {
        b.append('\\').append(c);
      } else if (c < 0x20) {
        b.append(String.format("\\u%04x", (int) c));
      } else {
        b.append(c);
      }
    }
    return b.append('"').toString();
  }
}
