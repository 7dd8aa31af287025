package cohortgate.bench;

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;

/**
 * Reads the op of a membership command, the JSON object
 * {"op":"leave"|"rejoin","user_id":42,"at_ns":...,"request_id":"..."}.
 * Only "op" matters to the gate; a value that is not such an object reads as
 * null (the cohortgate processor would dead-letter it).
 */
final class Command {
    static final String LEAVE = "leave";
    static final String REJOIN = "rejoin";

    private static final ObjectMapper JSON = new ObjectMapper();

    private Command() {}

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
