package kafkasec

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseMechanism(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Mechanism
		bad  bool
	}{
		{"", NoSASL, false},
		{"none", NoSASL, false},
		{"plain", Plain, false},
		{"SCRAM-SHA-256", ScramSHA256, false},
		{" scram-sha-512 ", ScramSHA512, false},
		{"OAUTHBEARER", OAuthBearer, false},
		{"GSSAPI", "", true},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseMechanism(tc.in)
			if (err != nil) != tc.bad || (!tc.bad && got != tc.want) {
				t.Fatalf("ParseMechanism(%q) = %q, %v", tc.in, got, err)
			}
		})
	}
}

// TestValidate: each bad combination is reported on its own line naming
// the flag to fix.
func TestValidate(t *testing.T) {
	dir := t.TempDir()
	token := filepath.Join(dir, "token")
	if err := os.WriteFile(token, []byte("eyJ.x.y\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(dir, "missing.pem")
	ok := func(c Config) Config { c.CheckTimeout = DefaultCheckTimeout; return c }
	for _, tc := range []struct {
		name string
		cfg  Config
		want []string // flags named, one line each; none: valid
	}{
		{"plaintext", ok(Config{}), nil},
		{"scram over tls", ok(Config{TLS: true, Mechanism: ScramSHA512, User: "u", Password: "p"}), nil},
		{"oauth", ok(Config{TLS: true, Mechanism: OAuthBearer, TokenFile: token}), nil},
		{"ca without tls", ok(Config{CAFile: missing}), []string{"--" + FlagTLSCA}},
		{"missing ca", ok(Config{TLS: true, CAFile: missing}), []string{"--" + FlagTLSCA}},
		{"cert without key", ok(Config{TLS: true, CertFile: missing}), []string{"--" + FlagTLSCert}},
		{"scram without user and password", ok(Config{Mechanism: ScramSHA256}), []string{"--" + FlagUser, "--" + FlagPassword}},
		{"password and file", ok(Config{Mechanism: Plain, User: "u", Password: "p", PasswordFile: token}), []string{"--" + FlagPassword}},
		{"user without mechanism", ok(Config{User: "u"}), []string{"--" + FlagUser}},
		{"oauth without token", ok(Config{Mechanism: OAuthBearer, User: "u"}), []string{"--" + FlagTokenFile, "--" + FlagUser}},
		{"check timeout", Config{CheckTimeout: time.Millisecond}, []string{"--" + FlagCheckTimeout}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want %v", tc.want)
			}
			lines := strings.Split(err.Error(), "\n")
			if len(lines) != len(tc.want) {
				t.Fatalf("%d lines, want %d:\n%v", len(lines), len(tc.want), err)
			}
			for i, w := range tc.want {
				if !strings.HasPrefix(lines[i], w+":") {
					t.Errorf("line %d %q does not start with %s:", i, lines[i], w)
				}
			}
		})
	}
}
