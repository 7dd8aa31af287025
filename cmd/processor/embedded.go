package main

import (
	"fmt"
	"net"
	"strconv"

	"github.com/twmb/franz-go/pkg/kfake"
)

// startEmbedded serves a single-node Kafka-protocol broker (franz-go's
// kfake) on addr, keeping its log in dir so that a restart finds the
// topics and offsets that match the local checkpoints. It is for trying
// the processor out; it is not a production broker. Its writes reach the
// operating system at once but are not fsynced: a killed process loses
// nothing, a power cut may.
func startEmbedded(addr, dir string) (*kfake.Cluster, error) {
	host, portText, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, fmt.Errorf("--embedded-addr %q: want 127.0.0.1:port: %v", addr, err)
	}
	if host != "127.0.0.1" && host != "localhost" {
		return nil, fmt.Errorf("--embedded-addr %q: the embedded broker only listens on 127.0.0.1", addr)
	}
	port, err := strconv.Atoi(portText)
	if err != nil || port < 0 || port > 65535 {
		return nil, fmt.Errorf("--embedded-addr %q: bad port", addr)
	}
	c, err := kfake.NewCluster(
		kfake.Ports(port),
		kfake.DataDir(dir),
		kfake.ClusterID("cohortgate-embedded"),
	)
	if err != nil {
		return nil, fmt.Errorf("unable to start the embedded broker on %s (is another broker or processor using the port? "+
			"processor run --brokers=%s uses it; --embedded-addr picks another port): %w", addr, addr, err)
	}
	return c, nil
}
