package integration

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tckafka "github.com/testcontainers/testcontainers-go/modules/kafka"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kversion"
)

// broker is the Kafka every test of this package talks to, picked once by
// TestMain: KAFKA_BROKERS if set (CI starts Apache Kafka with
// integration/kafka/kafka.sh), else a testcontainers Kafka when a Docker
// daemon answers, else franz-go's embedded kfake.
var broker struct {
	addrs []string
	kind  string // "external", "testcontainers", "embedded"
	// real is true for a real Apache Kafka broker (external or container),
	// whose transactions complete asynchronously.
	real bool
}

// containerImage is the Kafka image testcontainers runs where Docker exists.
const containerImage = "confluentinc/confluent-local:7.5.0"

func TestMain(m *testing.M) {
	stop, err := pickBroker()
	if err != nil {
		fmt.Fprintf(os.Stderr, "integration: no broker: %v\n", err)
		os.Exit(2)
	}
	fmt.Fprintf(os.Stderr, "integration: broker %s at %s, %s\n", broker.kind, strings.Join(broker.addrs, ","), brokerVersion())
	code := m.Run()
	stop()
	os.Exit(code)
}

func pickBroker() (stop func(), err error) {
	if env := os.Getenv("KAFKA_BROKERS"); env != "" {
		broker.addrs, broker.kind, broker.real = strings.Split(env, ","), "external", true
		return func() {}, nil
	}
	if stop, ok := tryContainer(); ok {
		return stop, nil
	}
	c, err := kfake.NewCluster(kfake.NumBrokers(1))
	if err != nil {
		return nil, err
	}
	broker.addrs, broker.kind = c.ListenAddrs(), "embedded (kfake)"
	return c.Close, nil
}

// tryContainer starts Kafka in a container when a Docker daemon answers
// within a few seconds.
func tryContainer() (stop func(), ok bool) {
	if !dockerAnswers() {
		return nil, false
	}
	runCtx, runCancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer runCancel()
	kc, err := tckafka.Run(runCtx, containerImage)
	if err != nil {
		fmt.Fprintf(os.Stderr, "integration: Docker answers but Kafka did not start (%v); using the embedded broker\n", err)
		if kc != nil {
			_ = testcontainers.TerminateContainer(kc)
		}
		return nil, false
	}
	addrs, err := kc.Brokers(runCtx)
	if err != nil {
		_ = testcontainers.TerminateContainer(kc)
		return nil, false
	}
	broker.addrs, broker.kind, broker.real = addrs, "testcontainers ("+containerImage+")", true
	return func() { _ = testcontainers.TerminateContainer(kc) }, true
}

// dockerAnswers reports whether a Docker daemon answers /_ping on
// DOCKER_HOST or the default socket. testcontainers panics when it finds no
// daemon, so it is asked only after this.
func dockerAnswers() bool {
	network, addr := "unix", "/var/run/docker.sock"
	if h := os.Getenv("DOCKER_HOST"); h != "" {
		u, err := url.Parse(h)
		if err != nil {
			return false
		}
		switch u.Scheme {
		case "unix":
			addr = u.Path
		case "tcp":
			network, addr = "tcp", u.Host
		default:
			return false
		}
	}
	hc := &http.Client{
		Timeout: 3 * time.Second,
		Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, network, addr)
		}},
	}
	resp, err := hc.Get("http://docker/_ping")
	if err != nil {
		return false
	}
	defer resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// brokerVersion asks the broker which API versions it speaks and names the
// Kafka release they match.
func brokerVersion() string {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	cl, err := kgo.NewClient(kgo.SeedBrokers(broker.addrs...))
	if err != nil {
		return "version unknown: " + err.Error()
	}
	defer cl.Close()
	vs, err := kadm.NewClient(cl).ApiVersions(ctx)
	if err != nil {
		return "version unknown: " + err.Error()
	}
	for _, v := range vs {
		if v.Err != nil {
			continue
		}
		return "speaks the protocol of Kafka " + kversion.FromApiVersionsResponse(v.Raw()).VersionGuess()
	}
	return "version unknown: " + errors.New("no broker answered ApiVersions").Error()
}
