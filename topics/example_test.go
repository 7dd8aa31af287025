package topics_test

import (
	"errors"
	"fmt"
	"sort"

	"github.com/cohortgate/cohortgate/topics"
)

func ExampleParseUserID() {
	for _, key := range []string{"42", "18446744073709551615", "007", "+1", ""} {
		id, err := topics.ParseUserID([]byte(key))
		fmt.Printf("%q: %d %v\n", key, id, err)
	}
	// Output:
	// "42": 42 <nil>
	// "18446744073709551615": 18446744073709551615 <nil>
	// "007": 0 topics: key_leading_zero: key "007" has a leading zero
	// "+1": 0 topics: key_not_decimal: key "+1": byte 0 is not an ASCII digit
	// "": 0 topics: key_empty: key is empty
}

func ExampleDecodeCommand() {
	key := []byte("9007199254740993") // 2^53+1: float64 would round it
	value := []byte(`{"op":"leave","user_id":9007199254740993,"at_ns":1764633600000000000,"client":"web"}`)
	c, err := topics.DecodeCommand(key, value)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(c.Op, c.UserID, c.AtNs, c.HasAt)
	// Output:
	// leave 9007199254740993 1764633600000000000 true
}

func ExampleDecodeCommand_rejected() {
	// What the processor puts in the DLQ headers for a bad command.
	_, err := topics.DecodeCommand([]byte("42"), []byte(`{"op":"leave","user_id":43}`))
	fmt.Println(topics.HeaderReason, "=", topics.ReasonOf(err))
	fmt.Println(topics.HeaderError, "=", err)
	fmt.Println(errors.Is(err, topics.ErrCommandUserMismatch))
	// Output:
	// cohortgate.reason = command_user_mismatch
	// cohortgate.error = topics: command_user_mismatch: user_id 43 differs from key 42
	// true
}

func ExampleAppendCommand() {
	c := topics.Command{Op: topics.Rejoin, UserID: 42, AtNs: 1764633600000000000, HasAt: true, RequestID: "r-1"}
	if err := c.Validate(); err != nil {
		fmt.Println(err)
		return
	}
	key := topics.AppendUserID(nil, c.UserID)
	value := topics.AppendCommand(nil, c)
	fmt.Printf("%s %s\n", key, value)
	// Output:
	// 42 {"op":"rejoin","user_id":42,"at_ns":1764633600000000000,"request_id":"r-1"}
}

func ExampleErrKeyInvalid() {
	for _, key := range []string{"", "x", "01", "18446744073709551616"} {
		_, err := topics.ParseUserID([]byte(key))
		fmt.Println(topics.ReasonOf(err), errors.Is(err, topics.ErrKeyInvalid))
	}
	// Output:
	// key_empty true
	// key_not_decimal true
	// key_leading_zero true
	// key_overflow true
}

func ExampleSet_Validate() {
	s := topics.Defaults()
	s.DLQ = "cohortgate dlq"
	fmt.Println(s.Validate())
	s.DLQ = s.Cohort
	fmt.Println(s.Validate())
	// Output:
	// topics: DLQ: topic "cohortgate dlq" has ' ' at byte 10; Kafka allows only [a-zA-Z0-9._-]
	// topics: DLQ: topic "cohort.signals" is also Cohort
}

func ExampleSet_Specs() {
	for _, spec := range topics.Defaults().Specs() {
		keys := make([]string, 0, len(spec.Configs))
		for k := range spec.Configs {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		fmt.Printf("%-9s %-20s co-partitioned=%-5t", spec.Role, spec.Topic, spec.SamePartitionsAsSignals)
		for _, k := range keys {
			fmt.Printf(" %s=%s", k, spec.Configs[k])
		}
		fmt.Println()
	}
	// Output:
	// Commands  membership.commands  co-partitioned=true  cleanup.policy=delete retention.bytes=-1 retention.ms=-1
	// Signals   engagement.signals   co-partitioned=false
	// Cohort    cohort.signals       co-partitioned=false
	// DLQ       cohortgate.dlq       co-partitioned=false
	// Changelog membership.changelog co-partitioned=false cleanup.policy=compact
}
