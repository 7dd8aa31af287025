package integration

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/cohortgate/cohortgate/integration/workload"
	"github.com/cohortgate/cohortgate/pkg/kafkasec"
	"github.com/cohortgate/cohortgate/topics"
)

// secureBroker is the SASL_SSL broker with an ACL authorizer that the
// security tests run against (integration/kafka/kafka.sh start-secure).
// Its address and credentials come from the environment that
// `kafka.sh secure-env` prints; without KAFKA_SECURE_BROKERS the tests
// skip.
type secureBroker struct {
	brokers               []string
	ca                    string
	clientCert, clientKey string
	adminUser, adminPass  string
	plainUser, plainPass  string
}

func requireSecure(t *testing.T) *secureBroker {
	t.Helper()
	addrs := os.Getenv("KAFKA_SECURE_BROKERS")
	if addrs == "" {
		if os.Getenv("COHORTGATE_REQUIRE_SECURE") == "1" {
			t.Fatal("COHORTGATE_REQUIRE_SECURE=1 but KAFKA_SECURE_BROKERS is not set: start the secure broker with " +
				"`bash integration/kafka/kafka.sh start-secure` and `eval \"$(bash integration/kafka/kafka.sh secure-env)\"`")
		}
		t.Skip("KAFKA_SECURE_BROKERS is not set; start the secure broker with `bash integration/kafka/kafka.sh start-secure` " +
			"and run `make test-secure`")
	}
	sb := &secureBroker{
		brokers:    strings.Split(addrs, ","),
		ca:         os.Getenv("KAFKA_SECURE_CA"),
		clientCert: os.Getenv("KAFKA_SECURE_CLIENT_CERT"),
		clientKey:  os.Getenv("KAFKA_SECURE_CLIENT_KEY"),
		adminUser:  os.Getenv("KAFKA_SECURE_ADMIN_USER"),
		adminPass:  os.Getenv("KAFKA_SECURE_ADMIN_PASSWORD"),
		plainUser:  os.Getenv("KAFKA_SECURE_PLAIN_USER"),
		plainPass:  os.Getenv("KAFKA_SECURE_PLAIN_PASSWORD"),
	}
	if sb.ca == "" || sb.adminUser == "" || sb.adminPass == "" {
		t.Fatal("KAFKA_SECURE_BROKERS is set but KAFKA_SECURE_CA, KAFKA_SECURE_ADMIN_USER or KAFKA_SECURE_ADMIN_PASSWORD is not: " +
			`eval "$(bash integration/kafka/kafka.sh secure-env)"`)
	}
	return sb
}

// scram is the security config of a SCRAM-SHA-512 user over TLS.
func (sb *secureBroker) scram(user, pass string) kafkasec.Config {
	return kafkasec.Config{TLS: true, CAFile: sb.ca, Mechanism: kafkasec.ScramSHA512, User: user, Password: pass,
		CheckTimeout: 10 * time.Second}
}

// client is a franz-go client of the secure broker as the given config.
func (sb *secureBroker) client(t *testing.T, sec kafkasec.Config, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	secOpts, err := sec.Opts()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(append(append([]kgo.Opt{kgo.SeedBrokers(sb.brokers...)}, secOpts...), opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// secEnv is one security test's private slice of the secure broker: its
// topics (created by admin), group, transactional-ID prefix and users,
// all removed when the test ends.
type secEnv struct {
	t         *testing.T
	sb        *secureBroker
	set       topics.Set
	group     string
	txnPrefix string
	admin     *kgo.Client
	adm       *kadm.Client
	users     []string
}

func newSecEnv(t *testing.T, parts int32) *secEnv {
	t.Helper()
	sb := requireSecure(t)
	id := randomID()
	e := &secEnv{
		t:         t,
		sb:        sb,
		set:       workload.Topics("sec-" + id),
		group:     "sec-" + id,
		txnPrefix: "sec-" + id + "-",
	}
	e.admin = sb.client(t, sb.scram(sb.adminUser, sb.adminPass), kgo.FetchIsolationLevel(kgo.ReadCommitted()))
	e.adm = kadm.NewClient(e.admin)
	t.Cleanup(e.cleanup)
	ctx := e.ctx(30 * time.Second)
	for _, s := range e.set.Specs() {
		configs := make(map[string]*string)
		for k, v := range s.Configs {
			configs[k] = kadm.StringPtr(v)
		}
		if _, err := e.adm.CreateTopic(ctx, parts, 1, configs, string(s.Topic)); err != nil {
			t.Fatalf("create %s: %v", s.Topic, err)
		}
	}
	return e
}

func (e *secEnv) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, _ = e.adm.DeleteTopics(ctx, e.names()...)
	_, _ = e.adm.DeleteGroup(ctx, e.group)
	for _, u := range e.users {
		_, _ = e.adm.DeleteACLs(ctx, kadm.NewACLs().Allow("User:"+u).AllowHosts().AnyResource().
			ResourcePatternType(kadm.ACLPatternAny).Operations())
		_, _ = e.adm.AlterUserSCRAMs(ctx, []kadm.DeleteSCRAM{{User: u, Mechanism: kadm.ScramSha512}}, nil)
	}
}

func (e *secEnv) names() []string {
	return []string{string(e.set.Commands), string(e.set.Signals), string(e.set.Cohort), string(e.set.DLQ), string(e.set.Changelog)}
}

func (e *secEnv) ctx(d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	e.t.Cleanup(cancel)
	return ctx
}

// acl is one ACL of a principal: an operation on a resource.
type acl struct {
	name     string // how tests and the README call it
	resource kmsg.ACLResourceType
	pattern  kadm.ACLPattern
	target   string // resource name or prefix; empty for the cluster
	op       kadm.ACLOperation
	// impliedBy, when set, says which other ACL of the set grants this
	// one too on Apache Kafka 3+: granting it separately is harmless,
	// removing it alone changes nothing.
	impliedBy string
}

// processorACLs are the ACLs `processor run` needs with exactly-once,
// topic creation off, a group starting with group (prefixed, so that each
// run of a test can have its own) and a transactional ID starting with
// txnPrefix: the least-privilege set docs/operations.md documents.
func (e *secEnv) processorACLs() []acl {
	topic := func(name string, t topics.Topic, op kadm.ACLOperation) acl {
		return acl{name, kmsg.ACLResourceTypeTopic, kadm.ACLPatternLiteral, string(t), op, ""}
	}
	return []acl{
		topic("Read on the commands topic", e.set.Commands, kadm.OpRead),
		topic("Write on the commands topic (re-publishing misrouted commands)", e.set.Commands, kadm.OpWrite),
		topic("Read on the signals topic", e.set.Signals, kadm.OpRead),
		topic("Write on the signals topic (re-publishing misrouted signals)", e.set.Signals, kadm.OpWrite),
		topic("Write on the cohort topic", e.set.Cohort, kadm.OpWrite),
		topic("Write on the DLQ topic", e.set.DLQ, kadm.OpWrite),
		topic("Write on the changelog topic", e.set.Changelog, kadm.OpWrite),
		topic("Read on the changelog topic (late-leave windows recovered on assignment)", e.set.Changelog, kadm.OpRead),
		topic("DescribeConfigs on the commands topic (max.message.bytes)", e.set.Commands, kadm.OpDescribeConfigs),
		topic("DescribeConfigs on the signals topic (max.message.bytes)", e.set.Signals, kadm.OpDescribeConfigs),
		topic("DescribeConfigs on the cohort topic (max.message.bytes)", e.set.Cohort, kadm.OpDescribeConfigs),
		topic("DescribeConfigs on the DLQ topic (max.message.bytes)", e.set.DLQ, kadm.OpDescribeConfigs),
		topic("DescribeConfigs on the changelog topic (max.message.bytes)", e.set.Changelog, kadm.OpDescribeConfigs),
		{"Read on the group", kmsg.ACLResourceTypeGroup, kadm.ACLPatternPrefixed, e.group, kadm.OpRead, ""},
		{"Write on the transactional-ID prefix", kmsg.ACLResourceTypeTransactionalId, kadm.ACLPatternPrefixed, e.txnPrefix, kadm.OpWrite, ""},
		{"Describe on the transactional-ID prefix", kmsg.ACLResourceTypeTransactionalId, kadm.ACLPatternPrefixed, e.txnPrefix, kadm.OpDescribe,
			"Write on the transactional-ID prefix (Write implies Describe)"},
		{"IdempotentWrite on the cluster", kmsg.ACLResourceTypeCluster, kadm.ACLPatternLiteral, "", kadm.OpIdempotentWrite,
			"Write on the transactional ID or any topic (KIP-679)"},
	}
}

// cliACLs are the ACLs of `processor leave|rejoin --wait`.
func (e *secEnv) cliACLs() []acl {
	return []acl{
		{"Write on the commands topic", kmsg.ACLResourceTypeTopic, kadm.ACLPatternLiteral, string(e.set.Commands), kadm.OpWrite, ""},
		{"Read on the changelog topic (--wait)", kmsg.ACLResourceTypeTopic, kadm.ACLPatternLiteral, string(e.set.Changelog), kadm.OpRead, ""},
	}
}

// user creates a SCRAM-SHA-512 user with the given ACLs, waits until the
// broker authenticates it and applies its ACLs, and returns its name and
// password.
func (e *secEnv) user(prefix string, acls []acl) (name, pass string) {
	e.t.Helper()
	name, pass = prefix+"-"+randomID(), "pw-"+randomID()
	e.users = append(e.users, name)
	ctx := e.ctx(30 * time.Second)
	if _, err := e.adm.AlterUserSCRAMs(ctx, nil, []kadm.UpsertSCRAM{{User: name, Mechanism: kadm.ScramSha512, Password: pass}}); err != nil {
		e.t.Fatalf("create user %s: %v", name, err)
	}
	for _, a := range acls {
		b := kadm.NewACLs().Allow("User:" + name).Operations(a.op).ResourcePatternType(a.pattern)
		switch a.resource {
		case kmsg.ACLResourceTypeTopic:
			b.Topics(a.target)
		case kmsg.ACLResourceTypeGroup:
			b.Groups(a.target)
		case kmsg.ACLResourceTypeTransactionalId:
			b.TransactionalIDs(a.target)
		case kmsg.ACLResourceTypeCluster:
			b.Clusters()
		}
		res, err := e.adm.CreateACLs(ctx, b)
		if err == nil {
			for _, r := range res {
				err = errors.Join(err, r.Err)
			}
		}
		if err != nil {
			e.t.Fatalf("grant %s to %s: %v", a.name, name, err)
		}
	}
	// Users and ACLs reach the broker's authenticator and authorizer
	// through the metadata log, a moment after the admin call returns.
	sec := e.sb.scram(name, pass)
	eventually(e.t, 20*time.Second, func() error {
		if err := sec.Check(ctx, e.sb.brokers); err != nil {
			return err
		}
		described, err := e.adm.DescribeACLs(ctx, kadm.NewACLs().Allow("User:"+name).AllowHosts().AnyResource().
			ResourcePatternType(kadm.ACLPatternAny).Operations())
		if err != nil {
			return err
		}
		n := 0
		for _, d := range described {
			if d.Err != nil {
				return d.Err
			}
			n += len(d.Described)
		}
		if n != len(acls) {
			return fmt.Errorf("user %s has %d of %d ACLs", name, n, len(acls))
		}
		return nil
	})
	return name, pass
}

// securityFlags are the flags of a client connecting as a SCRAM user; the
// password goes in the environment, as it should in production.
func (e *secEnv) securityFlags(user string) []string {
	return []string{
		"--brokers", strings.Join(e.sb.brokers, ","),
		"--kafka-tls", "--kafka-tls-ca", e.sb.ca,
		"--kafka-sasl-mechanism", "SCRAM-SHA-512", "--kafka-sasl-user", user,
	}
}

// runArgs are the arguments of `processor run` as user, with topic
// creation off (the topics exist) and short timings.
func (e *secEnv) runArgs(user, dataDir, httpAddr string, extra ...string) []string {
	args := append([]string{"run", "--group", e.group, "--data-dir", dataDir, "--http-addr", httpAddr,
		"--create-topics=false", "--transactional-id", e.txnPrefix + randomID(),
		"--grace", "100ms", "--commit-interval", "50ms", "--session-timeout", "6s"},
		e.securityFlags(user)...)
	return append(append(args, workload.TopicFlags(e.set)...), extra...)
}

// start runs `processor run` as user until the test ends.
func (e *secEnv) start(user, pass, dataDir string, extra ...string) *binary {
	e.t.Helper()
	b := &binary{http: freeAddr(e.t), stderr: &lockedBuffer{}, exited: make(chan error, 1)}
	b.cmd = exec.Command(processorBinary(e.t), e.runArgs(user, dataDir, b.http, extra...)...)
	b.cmd.Env = append(os.Environ(), "COHORTGATE_KAFKA_SASL_PASSWORD="+pass)
	b.start(e.t)
	return b
}

// outcome is how a processor command ended.
type outcome struct {
	out    string
	took   time.Duration
	err    error // the exit status; nil for exit 0
	killed bool  // still running at the deadline, then killed
}

// runToEnd runs the processor binary with args and the password in its
// environment, killing it after limit.
func runToEnd(t *testing.T, limit time.Duration, pass string, args ...string) outcome {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	cmd := exec.CommandContext(ctx, processorBinary(t), args...)
	if pass != "" {
		cmd.Env = append(os.Environ(), "COHORTGATE_KAFKA_SASL_PASSWORD="+pass)
	}
	start := time.Now()
	out, err := cmd.CombinedOutput()
	return outcome{out: string(out), took: time.Since(start), err: err, killed: ctx.Err() != nil}
}

// produce writes records as admin and waits for their acknowledgement.
func (e *secEnv) produce(rs ...*kgo.Record) {
	e.t.Helper()
	if err := e.admin.ProduceSync(e.ctx(30*time.Second), rs...).FirstErr(); err != nil {
		e.t.Fatalf("produce: %v", err)
	}
}

func (e *secEnv) signal(user uint64, ts time.Time) string {
	e.t.Helper()
	v := fmt.Sprintf("u%d@%d", user, ts.UnixMilli())
	e.produce(&kgo.Record{Topic: string(e.set.Signals), Key: topics.AppendUserID(nil, user), Value: []byte(v), Timestamp: ts})
	return v
}

// waitDecided waits until the group committed every signal produced.
func (e *secEnv) waitDecided() {
	e.t.Helper()
	ctx := e.ctx(60 * time.Second)
	eventually(e.t, 60*time.Second, func() error {
		ends, err := e.adm.ListEndOffsets(ctx, string(e.set.Signals))
		if err != nil {
			return err
		}
		committed, err := e.adm.FetchOffsets(ctx, e.group)
		if err != nil {
			return err
		}
		var lag error
		ends.Each(func(o kadm.ListedOffset) {
			if c, ok := committed.Lookup(o.Topic, o.Partition); o.Offset > 0 && (!ok || c.At < o.Offset) {
				lag = fmt.Errorf("partition %d: committed %d of %d", o.Partition, c.At, o.Offset)
			}
		})
		return lag
	})
}

// committedValues returns the values of the committed records of topic
// (read_committed, up to the last stable offsets), sorted.
func (e *secEnv) committedValues(topic topics.Topic) []string {
	e.t.Helper()
	ctx := e.ctx(60 * time.Second)
	ends := stableEnds(e.t, ctx, e.adm, topic)
	rs := readCommitted(e.t, ctx, topic, ends, func(opts ...kgo.Opt) (*kgo.Client, error) {
		return e.sb.client(e.t, e.sb.scram(e.sb.adminUser, e.sb.adminPass), opts...), nil
	})
	got := make([]string, 0, len(rs))
	for _, r := range rs {
		got = append(got, string(r.Value))
	}
	slices.Sort(got)
	return got
}

// writeCA writes a fresh self-signed CA certificate, one that signed
// nothing the broker holds, and returns its path.
func writeCA(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "not the broker's CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "other-ca.pem")
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}
