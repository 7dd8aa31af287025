package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/pkg/kafkasec"
	"github.com/cohortgate/cohortgate/topics"
)

// commandOptions are the flags of `processor leave` and `processor rejoin`.
type commandOptions struct {
	brokers   string
	topics    topicFlags
	user      string
	atNs      string
	requestID string
	wait      bool
	timeout   time.Duration
	security  kafkasec.Config
}

// publish is `processor leave` and `processor rejoin`: it publishes one
// command, keyed by the user id with Kafka's default partitioner, and with
// --wait returns only once the processor's receipt is on the changelog.
func publish(ctx context.Context, op topics.Op, args []string, stdout, stderr io.Writer) error {
	o := &commandOptions{}
	f := newFlags(op.String(), fmt.Sprintf("Publish a %s command for one user to the commands topic.", op), stderr)
	f.StringVar(&o.brokers, "brokers", "127.0.0.1:9092", "comma-separated seed brokers (host:port)")
	o.topics.register(f)
	f.StringVar(&o.user, "user", "", "user id, a decimal u64 (required)")
	f.StringVar(&o.atNs, "at-ns", "", "boundary in ns since the Unix epoch; empty: the record timestamp stands in")
	f.StringVar(&o.requestID, "request-id", "", "echoed into the changelog; empty: a random one")
	f.BoolVar(&o.wait, "wait", false, "wait for the processor's receipt on the changelog and print it")
	f.DurationVar(&o.timeout, "timeout", 30*time.Second, "how long to wait for the broker (and, with --wait, the receipt)")
	o.security.RegisterFlags(f.FlagSet)
	if err := f.parse(args); err != nil {
		return err
	}
	if err := o.security.Validate(); err != nil {
		return err
	}
	cmd, err := o.command(op)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	brokers := splitList(o.brokers)
	// A wrong TLS or SASL setting names its likely cause here instead of
	// surfacing as a bare EOF after --timeout.
	if err := o.security.Check(ctx, brokers); err != nil {
		return err
	}
	secOpts, err := o.security.Opts()
	if err != nil {
		return err
	}
	cl, err := kgo.NewClient(append(secOpts, kgo.SeedBrokers(brokers...))...)
	if err != nil {
		return fmt.Errorf("--brokers: %w", err)
	}
	defer cl.Close()

	var since map[int32]int64
	if o.wait {
		if since, err = endOffsets(ctx, cl, o.topics.changelog); err != nil {
			return err
		}
	}
	key := topics.AppendUserID(nil, cmd.UserID)
	rec := &kgo.Record{Topic: o.topics.commands, Key: key, Value: topics.AppendCommand(nil, cmd)}
	if err := cl.ProduceSync(ctx, rec).FirstErr(); err != nil {
		return fmt.Errorf("unable to publish to %s via %s: %w", o.topics.commands, o.brokers, err)
	}
	fmt.Fprintf(stdout, "published %s of user %d (request_id %s) to %s partition %d offset %d\n",
		op, cmd.UserID, cmd.RequestID, rec.Topic, rec.Partition, rec.Offset)
	if !o.wait {
		return nil
	}
	return waitReceipt(ctx, cl, o.topics.changelog, since, cmd, stdout)
}

func (o *commandOptions) command(op topics.Op) (topics.Command, error) {
	var errs []error
	user, err := topics.ParseUserID([]byte(o.user))
	if err != nil {
		errs = append(errs, fmt.Errorf("--user %q: want a decimal user id, e.g. --user=42", o.user))
	}
	cmd := topics.Command{Op: op, UserID: user, RequestID: o.requestID}
	if o.atNs != "" {
		at, err := strconv.ParseUint(o.atNs, 10, 64)
		if err != nil {
			errs = append(errs, fmt.Errorf("--at-ns %q: want nanoseconds since the Unix epoch, e.g. --at-ns=%d", o.atNs, time.Now().UnixNano()))
		}
		cmd.AtNs, cmd.HasAt = at, true
	}
	if o.timeout <= 0 {
		errs = append(errs, fmt.Errorf("--timeout %v: must be positive", o.timeout))
	}
	if cmd.RequestID == "" {
		var raw [8]byte
		_, _ = rand.Read(raw[:])
		cmd.RequestID = hex.EncodeToString(raw[:])
	}
	return cmd, errors.Join(errs...)
}

func endOffsets(ctx context.Context, cl *kgo.Client, topic string) (map[int32]int64, error) {
	listed, err := kadm.NewClient(cl).ListEndOffsets(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("unable to list %s: %w", topic, err)
	}
	out := make(map[int32]int64)
	var lerr error
	listed.Each(func(o kadm.ListedOffset) {
		if o.Err != nil {
			lerr = fmt.Errorf("topic %s: %w (is the processor running? it creates the topic)", topic, o.Err)
			return
		}
		out[o.Partition] = o.Offset
	})
	return out, lerr
}

// waitReceipt reads the changelog from the offsets seen before publishing
// until the record of cmd's request id appears, and prints it.
func waitReceipt(ctx context.Context, cl *kgo.Client, topic string, since map[int32]int64, cmd topics.Command, stdout io.Writer) error {
	start := make(map[int32]kgo.Offset, len(since))
	for p, o := range since {
		start[p] = kgo.NewOffset().At(o)
	}
	cl.AddConsumePartitions(map[string]map[int32]kgo.Offset{topic: start})
	for {
		fetches := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			return fmt.Errorf("no receipt for request_id %s on %s yet: %w (is the processor running?)", cmd.RequestID, topic, err)
		}
		var found *kgo.Record
		fetches.EachRecord(func(r *kgo.Record) {
			if found != nil {
				return
			}
			rec, err := topics.DecodeMemberRecord(r.Value)
			if err == nil && rec.UserID == cmd.UserID && rec.Command != nil && rec.Command.RequestID == cmd.RequestID {
				found = r
			}
		})
		if found != nil {
			var out bytes.Buffer
			if err := json.Indent(&out, found.Value, "", "  "); err != nil {
				out.Write(found.Value)
			}
			fmt.Fprintf(stdout, "receipt (%s partition %d offset %d):\n%s\n", topic, found.Partition, found.Offset, out.String())
			return nil
		}
	}
}

// status is `processor status`: it asks a running processor over HTTP.
func status(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var addr, user string
	f := newFlags("status", "Print a user's membership record as the running processor knows it.", stderr)
	f.StringVar(&addr, "http-addr", "127.0.0.1:8080", "HTTP address of the running processor")
	f.StringVar(&user, "user", "", "user id, a decimal u64 (required)")
	if err := f.parse(args); err != nil {
		return err
	}
	id, err := topics.ParseUserID([]byte(user))
	if err != nil {
		return fmt.Errorf("--user %q: want a decimal user id, e.g. --user=42", user)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	url := fmt.Sprintf("http://%s/v1/members/%d", addr, id)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("unable to reach the processor at --http-addr %s: %w", addr, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s: %s", url, resp.Status, bytes.TrimSpace(body))
	}
	_, err = stdout.Write(body)
	return err
}
