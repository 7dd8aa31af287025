package kafkasec

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// CheckError is a failed start-time check: the likely cause, in words an
// operator acts on, and the flag to change.
type CheckError struct {
	// Brokers are the seed brokers the check used.
	Brokers []string
	// Cause says what went wrong, e.g. "SASL authentication failed:
	// wrong user or password".
	Cause string
	// Fix says what to change, naming the flag.
	Fix string
	// Err is the error franz-go reported that led to the diagnosis.
	Err error
}

func (e *CheckError) Error() string {
	msg := fmt.Sprintf("unable to use the Kafka brokers at %s: %s", strings.Join(e.Brokers, ","), e.Cause)
	if e.Fix != "" {
		msg += "; " + e.Fix
	}
	if e.Err != nil {
		msg += fmt.Sprintf(" (client error: %v)", e.Err)
	}
	return msg
}

func (e *CheckError) Unwrap() error { return e.Err }

// Check connects to brokers as c says and asks for the cluster's metadata,
// within c.CheckTimeout. It returns nil once a broker answered, which
// proves the address, TLS and SASL settings; otherwise a *CheckError with
// the likely cause. A canceled ctx returns ctx's error.
//
// Check does not prove authorization: a principal may be authenticated
// and still lack the ACLs of the work it does.
func (c *Config) Check(ctx context.Context, brokers []string) error {
	timeout := c.checkTimeout()
	opts, err := c.Opts()
	if err != nil {
		return err
	}
	rec := &recorder{}
	cl, err := kgo.NewClient(append(checkClientOpts(brokers, timeout,
		kgo.DialTimeout(min(timeout, 10*time.Second)),
		kgo.WithHooks(rec),
	), opts...)...)
	if err != nil {
		return &CheckError{Brokers: brokers, Cause: "invalid client settings", Fix: "check --brokers", Err: err}
	}
	defer cl.Close()
	rctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req := kmsg.NewPtrMetadataRequest()
	req.Topics = []kmsg.MetadataRequestTopic{} // none: only the brokers
	_, err = req.RequestWith(rctx, cl)
	if err == nil {
		return nil
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return c.diagnose(brokers, rec.events(), err, timeout)
}

// checkTimeout is c.CheckTimeout, or DefaultCheckTimeout when unset.
func (c *Config) checkTimeout() time.Duration {
	if c.CheckTimeout <= 0 {
		return DefaultCheckTimeout
	}
	return c.CheckTimeout
}

// checkClientOpts are the options of a start-time check's client, before
// the security settings: the seed brokers, the checks' client ID, retries
// bounded by timeout, and extra.
func checkClientOpts(brokers []string, timeout time.Duration, extra ...kgo.Opt) []kgo.Opt {
	return append([]kgo.Opt{
		kgo.SeedBrokers(brokers...),
		kgo.ClientID("cohortgate-check"),
		kgo.RetryTimeout(timeout),
	}, extra...)
}

// event is one failure the client saw while connecting: a dial or
// connection set-up (key -1) or a request (its API key).
type event struct {
	addr string
	key  int16
	err  error
}

const keyConnect = -1

// API keys that tell which step of a connection failed.
const (
	keyApiVersions      = 18
	keySASLHandshake    = 17
	keySASLAuthenticate = 36
)

// recorder keeps the first failures of a check's connections. franz-go
// calls its hooks from its own goroutines.
type recorder struct {
	mu struct {
		sync.Mutex
		events []event // at most maxEvents, oldest first
	}
}

const maxEvents = 32

var (
	_ kgo.HookBrokerConnect = (*recorder)(nil)
	_ kgo.HookBrokerE2E     = (*recorder)(nil)
)

func (r *recorder) add(e event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.mu.events) < maxEvents {
		r.mu.events = append(r.mu.events, e)
	}
}

func (r *recorder) OnBrokerConnect(meta kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	if err != nil {
		r.add(event{addr: net.JoinHostPort(meta.Host, fmt.Sprint(meta.Port)), key: keyConnect, err: err})
	}
}

func (r *recorder) OnBrokerE2E(meta kgo.BrokerMetadata, key int16, e2e kgo.BrokerE2E) {
	if err := e2e.Err(); err != nil {
		r.add(event{addr: net.JoinHostPort(meta.Host, fmt.Sprint(meta.Port)), key: key, err: err})
	}
}

func (r *recorder) events() []event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]event(nil), r.mu.events...)
}

// diagnose names the likely cause of a failed check. The hooks' events
// carry the real error (a TLS alert, an x509 failure, the step at which
// the broker hung up) where the request itself may only report a timeout
// or a bare EOF.
func (c *Config) diagnose(brokers []string, events []event, reqErr error, timeout time.Duration) *CheckError {
	// The step that failed first: the request that got no answer, or
	// the dial (TCP and TLS handshake) when no request was answered.
	step := int16(keyConnect)
	cause := reqErr
	for _, e := range events {
		if e.key != keyConnect {
			step = e.key
			break
		}
	}
	for _, e := range events {
		if !isContextErr(e.err) {
			cause = e.err
			break
		}
	}
	ce := &CheckError{Brokers: brokers, Err: cause}
	ce.Cause, ce.Fix = c.explain(cause, step, timeout)
	return ce
}

func (c *Config) explain(err error, step int16, timeout time.Duration) (cause, fix string) {
	var (
		secret    *SecretError
		unknownCA x509.UnknownAuthorityError
		hostname  x509.HostnameError
		invalid   x509.CertificateInvalidError
		header    tls.RecordHeaderError
		alert     tls.AlertError
		dns       *net.DNSError
	)
	text := err.Error()
	switch {
	case errors.As(err, &secret):
		return "unable to read the SASL secret", fmt.Sprintf("check --%s", secret.Flag)

	case errors.As(err, &unknownCA):
		cause = "x509: certificate signed by unknown authority: the broker's certificate is not signed by a CA this client trusts"
		if c.CAFile == "" {
			return cause, fmt.Sprintf("set --%s to the PEM file of the CA that signed the broker certificates", FlagTLSCA)
		}
		return cause, fmt.Sprintf("check --%s (%s): it must hold the CA that signed the broker certificates", FlagTLSCA, c.CAFile)
	case errors.As(err, &hostname):
		return fmt.Sprintf("the broker's certificate is not valid for %q", hostname.Host),
			fmt.Sprintf("connect with a name the certificate holds, or set --%s", FlagTLSServer)
	case errors.As(err, &invalid):
		return fmt.Sprintf("the broker's certificate is not valid: %v", invalid),
			"renew the broker certificate, or check this host's clock"
	case errors.As(err, &header):
		return "the broker did not answer in TLS: the listener is plaintext (PLAINTEXT or SASL_PLAINTEXT)",
			fmt.Sprintf("check --%s: remove it, or use the broker's TLS port", FlagTLS)
	case errors.As(err, &alert), strings.Contains(text, "remote error: tls:"):
		if strings.Contains(text, "certificate required") || strings.Contains(text, "bad certificate") {
			return "the broker requires a client certificate it trusts (TLS alert: " + tlsAlertText(err) + ")",
				fmt.Sprintf("set --%s and --%s to a certificate signed by a CA the broker trusts", FlagTLSCert, FlagTLSKey)
		}
		return "the broker refused the TLS handshake (TLS alert: " + tlsAlertText(err) + ")",
			"compare the broker's TLS versions and ciphers with this client's (TLS 1.2 or later)"
	case strings.Contains(text, "tls alert record"):
		return "plaintext client to a TLS listener: the broker answered the first request with a TLS alert",
			fmt.Sprintf("set --%s (and --%s for a private CA)", FlagTLS, FlagTLSCA)
	case strings.Contains(text, "'HTTP'"):
		return "the address answers HTTP, not the Kafka protocol", "check --brokers"

	case errors.Is(err, kerr.SaslAuthenticationFailed):
		if c.Mechanism == OAuthBearer {
			return "SASL authentication failed: the broker rejected the OAUTHBEARER token",
				fmt.Sprintf("check the token in --%s (expired? wrong audience or issuer?)", FlagTokenFile)
		}
		fix = fmt.Sprintf("check --%s and --%s (or --%s)", FlagUser, FlagPassword, FlagPasswordFile)
		if c.Mechanism == ScramSHA256 || c.Mechanism == ScramSHA512 {
			fix += fmt.Sprintf("; SCRAM credentials exist per mechanism: the user needs %s credentials", c.Mechanism)
		}
		return "SASL authentication failed: wrong user or password", fix
	case errors.Is(err, kerr.UnsupportedSaslMechanism):
		return fmt.Sprintf("the listener does not enable SASL mechanism %s", c.Mechanism),
			fmt.Sprintf("set --%s to one of the listener's sasl.enabled.mechanisms", FlagMechanism)
	case errors.Is(err, kerr.IllegalSaslState):
		return "the listener does not use SASL (an SSL or PLAINTEXT listener)",
			fmt.Sprintf("remove --%s, or use the broker's SASL port", FlagMechanism)
	case errors.Is(err, kerr.ClusterAuthorizationFailed), errors.Is(err, kerr.TopicAuthorizationFailed):
		return "authenticated, but not authorized to describe the cluster", `grant the principal the ACLs of docs/operations.md, "Least privilege (ACLs)"`

	case isEOF(err):
		return c.explainEOF(step)
	case errors.Is(err, syscall.ECONNREFUSED):
		return "nothing listens at the address (connection refused)", "check --brokers and that the broker runs"
	case errors.As(err, &dns):
		return fmt.Sprintf("unable to resolve the broker host %q", dns.Name), "check --brokers"
	case isContextErr(err) || isTimeout(err):
		cause = fmt.Sprintf("no broker answered within %v", timeout)
		if c.TLS {
			return cause, fmt.Sprintf("check --brokers; a listener that does not speak TLS, a firewall or a broker still starting look like this (--%s raises the wait)", FlagCheckTimeout)
		}
		return cause, fmt.Sprintf("check --brokers; a TLS listener reached without --%s, a firewall or a broker still starting look like this (--%s raises the wait)", FlagTLS, FlagCheckTimeout)
	}
	return "unable to connect", "check --brokers and the --kafka-tls* and --kafka-sasl* flags"
}

// explainEOF names why a broker hung up, from the step it hung up at.
func (c *Config) explainEOF(step int16) (cause, fix string) {
	switch {
	case step == keyConnect && c.TLS:
		return "the broker closed the connection during the TLS handshake: is the listener plaintext?",
			fmt.Sprintf("check --%s: remove it for a PLAINTEXT or SASL_PLAINTEXT listener, or use the broker's TLS port", FlagTLS)
	case step == keyApiVersions && !c.TLS:
		return "the broker closed the connection at the first request: plaintext client to a TLS listener?",
			fmt.Sprintf("set --%s (and --%s for a private CA)", FlagTLS, FlagTLSCA)
	case step == keySASLHandshake || step == keySASLAuthenticate:
		return fmt.Sprintf("the broker closed the connection during SASL %s authentication", c.Mechanism),
			fmt.Sprintf("check that the listener enables %s (--%s)", c.Mechanism, FlagMechanism)
	case c.Mechanism == NoSASL:
		cause = "the broker closed the connection after the first request: the listener requires SASL authentication"
		fix = fmt.Sprintf("set --%s, --%s and --%s", FlagMechanism, FlagUser, FlagPassword)
		if !c.TLS {
			fix += fmt.Sprintf(" (and --%s for a SASL_SSL listener)", FlagTLS)
		}
		return cause, fix
	}
	return "the broker closed the connection", "check --brokers and the --kafka-tls* and --kafka-sasl* flags against the listener's security protocol"
}

func isEOF(err error) bool {
	var first *kgo.ErrFirstReadEOF
	return errors.As(err, &first) || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)
}

func isContextErr(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// tlsAlertText is the alert's description, e.g. "certificate required".
func tlsAlertText(err error) string {
	text := err.Error()
	if i := strings.LastIndex(text, "tls: "); i >= 0 {
		return strings.TrimSpace(text[i+len("tls: "):])
	}
	return text
}
