package cohortgate.bench;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

/**
 * Reads the op of a membership command, the JSON object
 * {"op":"leave"|"rejoin","user_id":42,"at_ns":...,"request_id":"..."}.
 * Only "op" matters to the plain gate, and "at_ns" (the boundary) to the
 * versioned one; a value that is not such an object reads as null (the
 * cohortgate processor would dead-letter it).
 */
final class Command {
    static final String LEAVE = "leave";
    static final String REJOIN = "rejoin";

    private static final ObjectMapper JSON = new ObjectMapper();

    private Command() {}

    /**
     * Returns the command's boundary in milliseconds, rounded up: at_ns is in
     * ns but Kafka Streams keeps record time in ms, and a signal stamped
     * t ms is inside an episode [left_at, rejoined_at) exactly when
     * t * 1e6 >= left_at and t * 1e6 < rejoined_at, that is when
     * t >= ceil(left_at / 1e6) and t < ceil(rejoined_at / 1e6); truncating
     * would move a boundary up to 1 ms earlier, dropping signals stamped in
     * the leave's millisecond before it and forwarding those stamped in the
     * rejoin's millisecond before it. fallback (the record timestamp, as the
     * processor takes it) when the value has no usable at_ns.
     */
    static long atMs(byte[] json, long fallback) {
        if (json == null) {
            return fallback;
        }
        try {
            JsonNode at = JSON.readTree(json).get("at_ns");
            if (at == null || !at.canConvertToExactIntegral() || at.bigIntegerValue().signum() < 0
                    || at.bigIntegerValue().bitLength() > 63) {
                return fallback;
            }
            long ns = at.longValue();
            return ns / 1_000_000L + (ns % 1_000_000L == 0 ? 0 : 1);
        } catch (java.io.IOException e) {
            return fallback;
        }
    }

    /** Returns "leave" or "rejoin", or null when json carries neither. */
    static String op(String json) {
        if (json == null) {
            return null;
        }
        try {
            JsonNode op = JSON.readTree(json).get("op");
            if (op == null || !op.isTextual()) {
                return null;
            }
            String s = op.textValue();
            return LEAVE.equals(s) ? LEAVE : REJOIN.equals(s) ? REJOIN : null;
        } catch (java.io.IOException e) {
            return null;
        }
    }
}
