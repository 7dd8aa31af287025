package client_test

import (
	"context"
	"fmt"
	"log"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/cohortgate/cohortgate/pkg/client"
)

// clientMetrics counts what a client sends and how long its receipts take,
// as Prometheus series: a HookPublished and a HookReceipt.
type clientMetrics struct {
	published *prometheus.CounterVec   // by op and result
	receipt   *prometheus.HistogramVec // by result
}

func (m clientMetrics) OnPublished(p client.Published, err error, _ time.Duration) {
	m.published.WithLabelValues(p.Command.Op.String(), result(err)).Inc()
}

func (m clientMetrics) OnReceipt(_ client.Published, err error, waited time.Duration) {
	m.receipt.WithLabelValues(result(err)).Observe(waited.Seconds())
}

func result(err error) string {
	if err != nil {
		return "error"
	}
	return "ok"
}

// The client keeps no metrics registry of its own: its hooks count what
// it sends and how long receipts take, here into Prometheus series.
func ExampleHooks() {
	brokers, stop, err := cohortgate()
	if err != nil {
		log.Fatal(err)
	}
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	m := clientMetrics{
		published: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "client_commands_published_total"}, []string{"op", "result"}),
		receipt:   prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: "client_receipt_wait_seconds"}, []string{"result"}),
	}
	c, err := client.New(client.Brokers(brokers...), client.Hooks(m))
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()

	for _, user := range []uint64{7, 8} {
		sent, err := c.Leave(ctx, user)
		if err != nil {
			log.Fatal(err)
		}
		if _, err := c.WaitReceipt(ctx, sent); err != nil {
			log.Fatal(err)
		}
	}
	var published, waited dto.Metric
	if err := m.published.WithLabelValues("leave", "ok").Write(&published); err != nil {
		log.Fatal(err)
	}
	if err := m.receipt.WithLabelValues("ok").(prometheus.Metric).Write(&waited); err != nil {
		log.Fatal(err)
	}
	fmt.Println("leaves published:", published.GetCounter().GetValue())
	fmt.Println("receipts timed:", waited.GetHistogram().GetSampleCount())
	// Output:
	// leaves published: 2
	// receipts timed: 2
}
