// Package kafkasec is the Kafka connection security of cohortgate's
// command-line clients: TLS (a CA bundle, an optional client certificate,
// a server name) and SASL (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, or
// OAUTHBEARER with a token read from a file), set by flags, turned into
// franz-go client options, and checked against the brokers at start.
//
// # Flags
//
// [Config.RegisterFlags] defines the --kafka-tls* and --kafka-sasl* flags
// on a flag set; [Config.Validate] reports every bad combination, one line
// per problem naming the flag and the fix; [Config.Opts] returns the
// []kgo.Opt to append to every client. Secrets never appear in errors or
// in [Config.String].
//
// Password and token files are read again on every authentication, so a
// rotated secret is picked up by the next connection without a restart.
//
// # The start-time check
//
// franz-go reports most wrong TLS or SASL settings as a bare EOF or keeps
// retrying. [Check] connects with the options, asks for cluster metadata
// under a short deadline, records what each connection attempt failed with
// (franz-go's HookBrokerConnect and HookBrokerE2E) and returns a
// [*CheckError] naming the likely cause and the flag to fix: a plaintext
// client at a TLS listener, a TLS client at a plaintext one, an unknown
// certificate authority, a wrong password, a missing SASL mechanism.
package kafkasec

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
)

// Mechanism is a SASL mechanism name as Kafka spells it.
type Mechanism string

// The SASL mechanisms a Config may name. The zero Mechanism is no SASL.
const (
	NoSASL      Mechanism = ""
	Plain       Mechanism = "PLAIN"
	ScramSHA256 Mechanism = "SCRAM-SHA-256"
	ScramSHA512 Mechanism = "SCRAM-SHA-512"
	OAuthBearer Mechanism = "OAUTHBEARER"
)

var mechanisms = []Mechanism{Plain, ScramSHA256, ScramSHA512, OAuthBearer}

// Flag names, for messages that tell the operator what to change.
const (
	FlagTLS          = "kafka-tls"
	FlagTLSCA        = "kafka-tls-ca"
	FlagTLSCert      = "kafka-tls-cert"
	FlagTLSKey       = "kafka-tls-key"
	FlagTLSServer    = "kafka-tls-server-name"
	FlagMechanism    = "kafka-sasl-mechanism"
	FlagUser         = "kafka-sasl-user"
	FlagPassword     = "kafka-sasl-password"
	FlagPasswordFile = "kafka-sasl-password-file"
	FlagTokenFile    = "kafka-sasl-oauth-token-file"
	FlagCheckTimeout = "kafka-check-timeout"
)

// DefaultCheckTimeout bounds the start-time connectivity check.
const DefaultCheckTimeout = 10 * time.Second

// Config is how a client connects to Kafka. The zero Config is plaintext
// without SASL.
type Config struct {
	// TLS dials brokers with TLS 1.2 or later.
	TLS bool
	// CAFile is a PEM bundle of the authorities that may sign broker
	// certificates. Empty: the system's roots.
	CAFile string
	// CertFile and KeyFile are the client's certificate (chain) and key,
	// PEM, for listeners that authenticate clients by certificate. Both
	// or neither.
	CertFile, KeyFile string
	// ServerName is the name the broker certificates must be valid for.
	// Empty: the host of each broker address.
	ServerName string

	// Mechanism is the SASL mechanism; NoSASL for none.
	Mechanism Mechanism
	// User is the PLAIN or SCRAM user.
	User string
	// Password is the PLAIN or SCRAM password; PasswordFile, if set
	// instead, holds it and is read on every authentication.
	Password, PasswordFile string
	// TokenFile holds the OAUTHBEARER token (a JWT); it is read on every
	// authentication, so whatever refreshes the file rotates the token.
	TokenFile string

	// CheckTimeout bounds Check. Default DefaultCheckTimeout.
	CheckTimeout time.Duration
}

// RegisterFlags defines the security flags on fs, writing into c. The
// flag set's own parsing (and cohortgate's environment fallback) fills c.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.BoolVar(&c.TLS, FlagTLS, false, "connect to the brokers with TLS (a TLS or SASL_SSL listener)")
	fs.StringVar(&c.CAFile, FlagTLSCA, "", "PEM file of the CA(s) that sign the broker certificates; empty: the system's roots")
	fs.StringVar(&c.CertFile, FlagTLSCert, "", "PEM client certificate (chain), for listeners that authenticate clients by certificate; needs --"+FlagTLSKey)
	fs.StringVar(&c.KeyFile, FlagTLSKey, "", "PEM private key of --"+FlagTLSCert)
	fs.StringVar(&c.ServerName, FlagTLSServer, "", "name the broker certificates must be valid for; empty: the host of each broker address")
	fs.Func(FlagMechanism, "SASL mechanism: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER; empty: no SASL", func(s string) error {
		m, err := ParseMechanism(s)
		c.Mechanism = m
		return err
	})
	fs.StringVar(&c.User, FlagUser, "", "SASL user (PLAIN and SCRAM)")
	fs.StringVar(&c.Password, FlagPassword, "", "SASL password (PLAIN and SCRAM); prefer its environment variable or --"+FlagPasswordFile+" to keep it out of the process list")
	fs.StringVar(&c.PasswordFile, FlagPasswordFile, "", "file holding the SASL password, read on every authentication")
	fs.StringVar(&c.TokenFile, FlagTokenFile, "", "file holding the OAUTHBEARER token (JWT), read on every authentication")
	fs.DurationVar(&c.CheckTimeout, FlagCheckTimeout, DefaultCheckTimeout, "how long the start-time check may take to reach the brokers and authenticate")
}

// ParseMechanism parses a SASL mechanism name, in any case; "" and "none"
// are NoSASL.
func ParseMechanism(s string) (Mechanism, error) {
	u := Mechanism(strings.ToUpper(strings.TrimSpace(s)))
	if u == "" || u == "NONE" {
		return NoSASL, nil
	}
	for _, m := range mechanisms {
		if u == m {
			return m, nil
		}
	}
	return NoSASL, fmt.Errorf("%q is not PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER", s)
}

// Validate reports every problem, one per line, each naming the flag and
// the fix. It reads the TLS material and the secret files, so a file that
// is missing or malformed is reported at start rather than at the first
// connection.
func (c *Config) Validate() error {
	var errs []error
	bad := func(flag, format string, args ...any) {
		errs = append(errs, fmt.Errorf("--%s: %s", flag, fmt.Sprintf(format, args...)))
	}
	for _, f := range []struct {
		name, value string
	}{{FlagTLSCA, c.CAFile}, {FlagTLSCert, c.CertFile}, {FlagTLSKey, c.KeyFile}, {FlagTLSServer, c.ServerName}} {
		if f.value != "" && !c.TLS {
			bad(f.name, "is set but TLS is off; add --%s (or remove --%s)", FlagTLS, f.name)
		}
	}
	if c.TLS {
		if c.CAFile != "" {
			if _, err := loadCA(c.CAFile); err != nil {
				bad(FlagTLSCA, "%v", err)
			}
		}
		switch {
		case (c.CertFile == "") != (c.KeyFile == ""):
			bad(FlagTLSCert, "--%s and --%s go together: set both or neither", FlagTLSCert, FlagTLSKey)
		case c.CertFile != "":
			if _, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile); err != nil {
				bad(FlagTLSCert, "unable to load the client certificate and key: %v", err)
			}
		}
	}

	switch c.Mechanism {
	case NoSASL:
		for _, f := range []struct{ name, value string }{
			{FlagUser, c.User}, {FlagPassword, c.Password}, {FlagPasswordFile, c.PasswordFile}, {FlagTokenFile, c.TokenFile},
		} {
			if f.value != "" {
				bad(f.name, "is set but --%s is not; set it (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER)", FlagMechanism)
			}
		}
	case Plain, ScramSHA256, ScramSHA512:
		if c.User == "" {
			bad(FlagUser, "required with --%s=%s", FlagMechanism, c.Mechanism)
		}
		switch {
		case c.Password != "" && c.PasswordFile != "":
			bad(FlagPassword, "set --%s or --%s, not both", FlagPassword, FlagPasswordFile)
		case c.Password == "" && c.PasswordFile == "":
			bad(FlagPassword, "required with --%s=%s (or --%s)", FlagMechanism, c.Mechanism, FlagPasswordFile)
		case c.PasswordFile != "":
			if _, err := readSecret(c.PasswordFile); err != nil {
				bad(FlagPasswordFile, "%v", err)
			}
		}
		if c.TokenFile != "" {
			bad(FlagTokenFile, "is for OAUTHBEARER, not %s; remove it", c.Mechanism)
		}
	case OAuthBearer:
		if c.TokenFile == "" {
			bad(FlagTokenFile, "required with --%s=OAUTHBEARER", FlagMechanism)
		} else if _, err := readSecret(c.TokenFile); err != nil {
			bad(FlagTokenFile, "%v", err)
		}
		for _, f := range []struct{ name, value string }{
			{FlagUser, c.User}, {FlagPassword, c.Password}, {FlagPasswordFile, c.PasswordFile},
		} {
			if f.value != "" {
				bad(f.name, "is not used with OAUTHBEARER (the token names the principal); remove it")
			}
		}
	default:
		bad(FlagMechanism, "%q is not PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER", c.Mechanism)
	}
	if c.CheckTimeout < time.Second || c.CheckTimeout > 5*time.Minute {
		bad(FlagCheckTimeout, "%v must be between 1s and 5m", c.CheckTimeout)
	}
	return errors.Join(errs...)
}

// Warnings are settings that work but should not be used in production.
// A password given on the command line is the caller's to warn about: only
// it knows whether the flag or its environment variable set it.
func (c *Config) Warnings() []string {
	var w []string
	if !c.TLS && (c.Mechanism == Plain || c.Mechanism == OAuthBearer) {
		w = append(w, fmt.Sprintf("--%s=%s without --%s sends the secret in clear text", FlagMechanism, c.Mechanism, FlagTLS))
	}
	return w
}

// Opts returns the franz-go options that make a client connect as c
// says: a TLS dialer and a SASL mechanism, or nothing for plaintext.
func (c *Config) Opts() ([]kgo.Opt, error) {
	var opts []kgo.Opt
	if c.TLS {
		tc, err := c.tlsConfig()
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	if c.Mechanism != NoSASL {
		m, err := c.mechanism()
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.SASL(m))
	}
	return opts, nil
}

func (c *Config) tlsConfig() (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: c.ServerName}
	if c.CAFile != "" {
		pool, err := loadCA(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("--%s: %w", FlagTLSCA, err)
		}
		tc.RootCAs = pool
	}
	if c.CertFile != "" || c.KeyFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("--%s/--%s: %w", FlagTLSCert, FlagTLSKey, err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	return tc, nil
}

func (c *Config) mechanism() (sasl.Mechanism, error) {
	switch c.Mechanism {
	case Plain:
		return plainMechanism(c.User, c.password), nil
	case ScramSHA256, ScramSHA512:
		return scramMechanism(c.Mechanism, c.User, c.password), nil
	case OAuthBearer:
		return oauthMechanism(c.TokenFile), nil
	}
	return nil, fmt.Errorf("--%s: %q is not PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER", FlagMechanism, c.Mechanism)
}

// password returns the password, reading PasswordFile when it is set.
func (c *Config) password() (string, error) {
	if c.PasswordFile == "" {
		return c.Password, nil
	}
	return readSecret(c.PasswordFile)
}

// String describes c for logs, without secrets.
func (c *Config) String() string {
	var b strings.Builder
	if c.TLS {
		b.WriteString("TLS")
		var parts []string
		if c.CAFile != "" {
			parts = append(parts, "CA "+c.CAFile)
		}
		if c.CertFile != "" {
			parts = append(parts, "client certificate "+c.CertFile)
		}
		if c.ServerName != "" {
			parts = append(parts, "server name "+c.ServerName)
		}
		if len(parts) > 0 {
			b.WriteString(" (" + strings.Join(parts, ", ") + ")")
		}
	} else {
		b.WriteString("plaintext")
	}
	switch c.Mechanism {
	case NoSASL:
		b.WriteString(", no SASL")
	case OAuthBearer:
		fmt.Fprintf(&b, ", SASL OAUTHBEARER (token file %s)", c.TokenFile)
	default:
		fmt.Fprintf(&b, ", SASL %s as %q", c.Mechanism, c.User)
	}
	return b.String()
}

// loadCA reads a PEM bundle that must hold at least one certificate.
func loadCA(path string) (*x509.CertPool, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("unable to read the CA bundle: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("%s holds no PEM certificate (want -----BEGIN CERTIFICATE-----)", path)
	}
	return pool, nil
}

// readSecret reads a password or token file: one value, surrounding
// white space (a trailing newline) removed, not empty.
func readSecret(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("unable to read: %w", err)
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return "", fmt.Errorf("%s is empty", path)
	}
	return s, nil
}
