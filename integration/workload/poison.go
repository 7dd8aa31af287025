package workload

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// poison writes records that every rule of the README sends to the DLQ,
// on both inputs, and a valid signal near the size limit. The commands
// are for user u, whose commands all go to the DLQ (u stays Active: its
// signals are forwarded); the large valid signal is big's.
//
//   - an oversize bad-JSON command (3/4 of LargeBytes; about 800 KB by
//     default), in its key's partition and once more in another one;
//   - malformed values: a repeated member, an unknown op, a user_id other
//     than the key, at_ns a string, a fraction, negative; request_id a
//     number; an array; trailing data; not JSON;
//   - boundaries out of range: at_ns 2^64-1 and 2^63;
//   - bad keys: leading zero, empty, null, a sign, above 2^64-1, a letter;
//   - signals with bad keys: a small one and one of LargeBytes;
//   - a valid signal of LargeBytes-20000 bytes: within the broker's limit
//     and above franz-go's default batch limit.
func (sc *scene) poison(ctx context.Context) error {
	u, big := sc.s.Users[0], sc.s.Users[1]
	key := userKey(u)
	n := sc.p.count(true)
	right := murmurPartition(key, n)
	id := strconv.FormatUint(u, 10)
	large := sc.randomFill([]byte(`{"op":"leave","user_id":`+id+`,"pad":"`), sc.p.h.LargeBytes*3/4)
	type cmd struct {
		key       []byte
		partition int32
		value     string
	}
	cmds := []cmd{{key, right, string(large)}}
	if n > 1 {
		cmds = append(cmds, cmd{key, (right + 1) % n, string(large)})
	}
	for _, v := range []string{
		`{"op":"leave","op":"rejoin","user_id":` + id + `}`,
		`{"op":"quit","user_id":` + id + `}`,
		`{"op":"leave","user_id":` + strconv.FormatUint(u+1, 10) + `}`,
		`{"op":"leave","user_id":` + id + `,"at_ns":"1"}`,
		`{"op":"leave","user_id":` + id + `,"at_ns":1.5e18}`,
		`{"op":"leave","user_id":` + id + `,"at_ns":-1}`,
		`{"op":"leave","user_id":` + id + `,"request_id":5}`,
		`[{"op":"leave","user_id":` + id + `}]`,
		`{"op":"leave","user_id":` + id + `} trailing`,
		`not json`,
		`{"op":"leave","user_id":` + id + `,"at_ns":18446744073709551615}`,
		`{"op":"leave","user_id":` + id + `,"at_ns":9223372036854775808}`,
	} {
		cmds = append(cmds, cmd{key, right, v})
	}
	valid := `{"op":"leave","user_id":` + id + `}`
	for _, k := range [][]byte{[]byte("0" + id), {}, nil, []byte("-" + id), []byte("18446744073709551616"), []byte(id + "x")} {
		p := int32(0)
		if len(k) > 0 {
			p = murmurPartition(k, n)
		}
		cmds = append(cmds, cmd{k, p, valid})
	}
	now := time.Now()
	for _, c := range cmds {
		r := &kgo.Record{Topic: string(sc.p.set.Commands), Partition: c.partition, Key: c.key, Value: []byte(c.value), Timestamp: now}
		if err := sc.produce(ctx, sc.p.c.Hostile, r); err != nil {
			return fmt.Errorf("producing a poison command of %d bytes with key %q: %w", len(c.value), c.key, err)
		}
	}

	badSmall, badLarge := []byte("0"+id), []byte("user-"+id)
	for _, s := range []*kgo.Record{
		sc.signalRecord(badSmall, murmurPartition(badSmall, sc.p.count(false)), sc.p.size, time.Now()),
		sc.signalRecord(badLarge, murmurPartition(badLarge, sc.p.count(false)), sc.p.h.LargeBytes, time.Now()),
		sc.signalRecord(userKey(big), murmurPartition(userKey(big), sc.p.count(false)), sc.p.h.LargeBytes-20_000, time.Now()),
	} {
		if err := sc.produceSignal(ctx, s); err != nil {
			return err
		}
	}
	if err := sc.signal(ctx, big, murmur, noGate); err != nil {
		return err
	}
	return sc.signal(ctx, u, murmur, noGate)
}
