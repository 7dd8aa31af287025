package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/cohortgate/cohortgate/internal/cmdline"
	"github.com/cohortgate/cohortgate/pkg/client"
	"github.com/cohortgate/cohortgate/pkg/kafkasec"
	"github.com/cohortgate/cohortgate/topics"
)

// kafkaFlags are how `processor leave|rejoin|status` reach Kafka.
type kafkaFlags struct {
	brokers  string
	topics   topicFlags
	security kafkasec.Config
}

// register defines the topic and security flags; --brokers is each
// command's own, for its default differs.
func (k *kafkaFlags) register(f *flags) {
	k.topics.register(f)
	k.security.RegisterFlags(f.FlagSet)
}

// client checks the connection settings against the brokers, so that a
// wrong TLS or SASL setting names its likely cause instead of surfacing
// as a bare EOF after --timeout, and returns a client with them.
func (k *kafkaFlags) client(ctx context.Context, opts ...client.Opt) (*client.Client, error) {
	if err := k.security.Validate(); err != nil {
		return nil, err
	}
	seeds := cmdline.List(k.brokers)
	if err := k.security.Check(ctx, seeds); err != nil {
		return nil, err
	}
	c, err := client.New(append([]client.Opt{client.Brokers(seeds...), client.Security(k.security), client.Topics(k.topics.set())}, opts...)...)
	if err != nil {
		return nil, fmt.Errorf("--brokers %s: %w", k.brokers, err)
	}
	return c, nil
}

// commandOptions are the flags of `processor leave` and `processor rejoin`.
type commandOptions struct {
	kafkaFlags
	user      string
	atNs      string
	requestID string
	wait      bool
	timeout   time.Duration
	bulk      bulkOptions
}

// publish is `processor leave` and `processor rejoin`, a thin wrapper of
// pkg/client: it publishes one command, keyed by the user id with Kafka's
// default partitioner, and with --wait returns only once the processor's
// receipt is on the changelog. With --from it publishes one per user of
// a file, as a job (bulk).
func publish(ctx context.Context, op topics.Op, args []string, stdout, stderr io.Writer) error {
	o := &commandOptions{}
	f := newFlags(op.String(), fmt.Sprintf("Publish a %s command for one user (--user) to the commands topic, or for every user of a file\n"+
		"(--from), as a job that may be run again: its summary says what the processor made of each.", op), stdout)
	f.StringVar(&o.brokers, "brokers", "127.0.0.1:9092", "comma-separated seed brokers (host:port)")
	o.kafkaFlags.register(f)
	f.StringVar(&o.user, "user", "", "user id, a decimal u64 (required without --from)")
	f.StringVar(&o.atNs, "at-ns", "", "boundary in ns since the Unix epoch; empty: the record timestamp stands in")
	f.StringVar(&o.requestID, "request-id", "", "echoed into the changelog; empty: a random one")
	f.BoolVar(&o.wait, "wait", false, "wait for the processor's receipt on the changelog and print it")
	f.DurationVar(&o.timeout, "timeout", 30*time.Second, "how long to wait for the broker (and, with --wait, the receipt); with --from, how long the job may go without any progress before the receipts still missing are given up")
	o.bulk.register(f)
	if err := f.parse(args); err != nil {
		return err
	}
	if o.bulk.from != "" {
		return bulk(ctx, op, o, stdout, stderr)
	}
	user, cmdOpts, err := o.command()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	c, err := o.client(ctx)
	if err != nil {
		return err
	}
	defer c.Close()

	send := c.Leave
	if op == topics.Rejoin {
		send = c.Rejoin
	}
	p, err := send(ctx, user, cmdOpts...)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "published %s of user %d (request_id %s) to %s partition %d offset %d\n",
		op, user, p.Command.RequestID, p.Topic, p.Partition, p.Offset)
	if !o.wait {
		return nil
	}
	rec, err := c.WaitReceipt(ctx, p)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "receipt (%s):\n", o.topics.changelog)
	return printRecord(stdout, rec)
}

func (o *commandOptions) command() (uint64, []client.CommandOpt, error) {
	var errs []error
	user, err := parseUser(o.user)
	if err != nil {
		errs = append(errs, err)
	}
	opts := []client.CommandOpt{client.RequestID(o.requestID)}
	if o.atNs != "" {
		at, err := strconv.ParseInt(o.atNs, 10, 64)
		if err != nil || at < 0 {
			errs = append(errs, fmt.Errorf("--at-ns %q: want nanoseconds since the Unix epoch, e.g. --at-ns=%d", o.atNs, time.Now().UnixNano()))
		}
		opts = append(opts, client.At(time.Unix(0, at)))
	}
	if o.timeout <= 0 {
		errs = append(errs, fmt.Errorf("--timeout %v: must be positive", o.timeout))
	}
	if o.bulk.job != "" || o.bulk.skipBad {
		errs = append(errs, errors.New("--job and --skip-bad-lines go with --from FILE (a job of many users)"))
	}
	return user, opts, errors.Join(errs...)
}

// printRecord prints a changelog record as the HTTP API does: indented
// JSON.
func printRecord(w io.Writer, rec topics.MemberRecord) error {
	var out bytes.Buffer
	if err := json.Indent(&out, topics.AppendMemberRecord(nil, rec), "", "  "); err != nil {
		return err
	}
	out.WriteByte('\n')
	_, err := w.Write(out.Bytes())
	return err
}

// status is `processor status`: it asks a running processor over HTTP or,
// with --brokers, reads the user's latest changelog record through
// pkg/client.
func status(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var addr, tokenFile, user string
	var k kafkaFlags
	var timeout time.Duration
	f := newFlags("status", "Print a user's membership record: as the membership API of the running processor at\n"+
		"--api-addr knows it or, with --brokers, as the user's latest changelog record says.", stdout)
	f.StringVar(&addr, "api-addr", "127.0.0.1:8081", "address of the running processor's membership API (its --api-addr)")
	// A pod's environment names the data dir once for every subcommand,
	// and the processor creates its token there: status looks there too.
	dataDir := "cohortgate-data"
	if d := os.Getenv(envName("data-dir")); d != "" {
		dataDir = d
	}
	f.StringVar(&tokenFile, "api-token-file", filepath.Join(dataDir, apiTokenFileName), "file holding the API's bearer token (the processor's --api-token-file; by default the one it creates in its --data-dir, COHORTGATE_DATA_DIR if set)")
	f.StringVar(&user, "user", "", "user id, a decimal u64 (required)")
	f.StringVar(&k.brokers, "brokers", "", "comma-separated seed brokers (host:port); set: read the changelog instead of asking --api-addr")
	k.register(f)
	f.DurationVar(&timeout, "timeout", 10*time.Second, "how long to wait for the processor or the brokers")
	if err := f.parse(args); err != nil {
		return err
	}
	id, err := parseUser(user)
	if err != nil {
		return err
	}
	if timeout <= 0 {
		return fmt.Errorf("--timeout %v: must be positive", timeout)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if k.brokers == "" {
		return statusHTTP(ctx, addr, tokenFile, id, stdout)
	}
	c, err := k.client(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	rec, err := c.Status(ctx, id)
	if err != nil {
		return err
	}
	return printRecord(stdout, rec)
}

// statusHTTP asks the processor's API at addr for the user's record,
// with the token in tokenFile.
func statusHTTP(ctx context.Context, addr, tokenFile string, id uint64, stdout io.Writer) error {
	token, err := readToken(tokenFile)
	if err != nil {
		return fmt.Errorf("--api-token-file: %w", err)
	}
	url := fmt.Sprintf("http://%s/v1/members/%d", addr, id)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("unable to reach the processor's membership API at --api-addr %s: %w", addr, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return err
	}
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusMisdirectedRequest:
		// Behind a Service, the instance reached is often not the owner.
		return fmt.Errorf("%s: %s: %s\nthe processor at --api-addr %s does not own this user; ask the owner's --api-addr, or read the changelog with --brokers",
			url, resp.Status, bytes.TrimSpace(body), addr)
	default:
		return fmt.Errorf("%s: %s: %s", url, resp.Status, bytes.TrimSpace(body))
	}
	_, err = stdout.Write(body)
	return err
}
