package kafkasec

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// SecretError is a password or token file that could not be read when a
// connection authenticated.
type SecretError struct {
	Flag string // the flag naming the file
	Err  error
}

func (e *SecretError) Error() string { return fmt.Sprintf("--%s: %v", e.Flag, e.Err) }
func (e *SecretError) Unwrap() error { return e.Err }

// Each mechanism asks for its secret on every authentication (franz-go
// calls the function per connection and per re-authentication), so a
// rotated file takes effect on the next connection.

func plainMechanism(user string, password func() (string, error)) sasl.Mechanism {
	return plain.Plain(func(context.Context) (plain.Auth, error) {
		p, err := password()
		if err != nil {
			return plain.Auth{}, &SecretError{Flag: FlagPasswordFile, Err: err}
		}
		return plain.Auth{User: user, Pass: p}, nil
	})
}

func scramMechanism(m Mechanism, user string, password func() (string, error)) sasl.Mechanism {
	fn := func(context.Context) (scram.Auth, error) {
		p, err := password()
		if err != nil {
			return scram.Auth{}, &SecretError{Flag: FlagPasswordFile, Err: err}
		}
		return scram.Auth{User: user, Pass: p}, nil
	}
	if m == ScramSHA512 {
		return scram.Sha512(fn)
	}
	return scram.Sha256(fn)
}

func oauthMechanism(tokenFile string) sasl.Mechanism {
	return oauth.Oauth(func(context.Context) (oauth.Auth, error) {
		tok, err := readSecret(tokenFile)
		if err != nil {
			return oauth.Auth{}, &SecretError{Flag: FlagTokenFile, Err: err}
		}
		return oauth.Auth{Token: tok}, nil
	})
}
