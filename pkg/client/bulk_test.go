package client_test

import (
	"context"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/cohortgate/cohortgate/pkg/client"
	"github.com/cohortgate/cohortgate/topics"
)

// counter counts the client's events, as a caller's metrics would.
type counter struct {
	published, receipts, failed atomic.Int64
}

func (c *counter) OnPublished(p client.Published, err error, _ time.Duration) {
	if err == nil {
		c.published.Add(1)
	}
}

func (c *counter) OnReceipt(p client.Published, err error, _ time.Duration) {
	if err != nil {
		c.failed.Add(1)
		return
	}
	c.receipts.Add(1)
}

// countHook is a franz-go hook that counts the records its client
// fetched.
type countHook struct{ fetched *atomic.Int64 }

func (h countHook) OnFetchRecordUnbuffered(*kgo.Record, bool) { h.fetched.Add(1) }

// TestApplyBatch: a batch of leaves, published pipelined, each with the
// receipt of its own command; the client's hooks count every publish and
// receipt, and the franz-go hooks reach the producer and the watcher.
func TestApplyBatch(t *testing.T) {
	brokers := processor(t)
	var count counter
	var mu sync.Mutex
	var ids []string
	var fetched atomic.Int64
	c := newClient(t, client.Brokers(brokers...), client.Hooks(&count),
		client.KafkaHooks(func(id string) []kgo.Hook {
			mu.Lock()
			ids = append(ids, id)
			mu.Unlock()
			return []kgo.Hook{countHook{&fetched}}
		}))
	ctx := timeout(t, 60*time.Second)
	const n = 300
	reqs := make([]client.Request, n)
	at := time.Now().Add(-time.Second)
	for i := range reqs {
		reqs[i] = client.Request{Op: topics.Leave, UserID: uint64(1000 + i), Opts: []client.CommandOpt{client.Intent("job-1", at)}}
	}
	for _, r := range c.ApplyBatch(ctx, reqs) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		cmd := r.Record.Command
		if r.Record.Status != "left" || cmd == nil || cmd.Offset != r.Published.Offset || cmd.Partition != r.Published.Partition ||
			r.Record.UserID != r.Published.Command.UserID {
			t.Fatalf("receipt %s for %+v", asJSON(r.Record), r.Published)
		}
	}
	if count.published.Load() != n || count.receipts.Load() != n || count.failed.Load() != 0 {
		t.Errorf("hooks counted %d published, %d receipts, %d failed; want %d, %d, 0",
			count.published.Load(), count.receipts.Load(), count.failed.Load(), n, n)
	}
	mu.Lock()
	got := slices.Clone(ids)
	mu.Unlock()
	if !slices.Contains(got, "cohortgate-client") || !slices.Contains(got, "cohortgate-client-receipts") {
		t.Errorf("KafkaHooks called for %q; want the producer and the watcher", got)
	}
	if fetched.Load() < n {
		t.Errorf("the watcher's hooks saw %d records fetched, want at least %d", fetched.Load(), n)
	}

	// The same job again changes nothing: every receipt a duplicate.
	for _, r := range c.PublishBatch(ctx, reqs[:10]) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		rec, err := c.WaitReceipt(ctx, r.Published)
		if err != nil || !rec.Command.Duplicate || rec.Command.Offset != r.Published.Offset {
			t.Fatalf("the job again: %s, %v; want a duplicate at offset %d", asJSON(rec), err, r.Published.Offset)
		}
	}
}

// TestReceiptForgotten: answers read before anyone waits for them are
// kept up to Unclaimed; a forgotten one is found by a scan, as exact.
func TestReceiptForgotten(t *testing.T) {
	brokers := processor(t)
	c := newClient(t, client.Brokers(brokers...), client.Unclaimed(1))
	ctx := timeout(t, 60*time.Second)
	var sent []client.Published
	for i := range 6 {
		p, err := c.Leave(ctx, uint64(500+i))
		if err != nil {
			t.Fatal(err)
		}
		sent = append(sent, p)
	}
	// The first wait starts the watcher, which reads every answer; the
	// others are waited for once it has read past them.
	if _, err := c.WaitReceipt(ctx, sent[0]); err != nil {
		t.Fatal(err)
	}
	for _, p := range slices.Backward(sent) {
		rec, err := c.WaitReceipt(ctx, p)
		if err != nil || rec.Command.Offset != p.Offset || rec.UserID != p.Command.UserID {
			t.Fatalf("receipt %s, %v for %+v", asJSON(rec), err, p)
		}
	}
	ctx2, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := c.WaitReceipt(ctx2, sent[0]); err == nil {
		t.Error("a wait with a cancelled context succeeded")
	}
}

// TestWaitTwice: a receipt waited for twice is answered twice.
func TestWaitTwice(t *testing.T) {
	brokers := processor(t)
	c := newClient(t, client.Brokers(brokers...))
	ctx := timeout(t, 30*time.Second)
	p, err := c.Leave(ctx, 61)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if rec, err := c.WaitReceipt(ctx, p); err != nil || rec.Command.Offset != p.Offset {
			t.Fatalf("receipt %s, %v", asJSON(rec), err)
		}
	}
}

// TestApplyAsync: a stream of ApplyAsync calls gets every receipt from
// the one watcher, which starts before the first record is stamped: no
// command is left to a scan of its own (a reader "-read-N"), however the
// acknowledgements of the partitions interleave.
func TestApplyAsync(t *testing.T) {
	brokers := processor(t)
	var mu sync.Mutex
	var ids []string
	c := newClient(t, client.Brokers(brokers...), client.KafkaHooks(func(id string) []kgo.Hook {
		mu.Lock()
		ids = append(ids, id)
		mu.Unlock()
		return nil
	}))
	ctx := timeout(t, 60*time.Second)
	const n = 300
	results := make(chan client.Result, n)
	at := time.Now().Add(-time.Second)
	for i := range n {
		r := client.Request{Op: topics.Leave, UserID: uint64(5000 + i), Opts: []client.CommandOpt{client.Intent("job-async", at)}}
		c.ApplyAsync(ctx, r, func(res client.Result) { results <- res })
	}
	for range n {
		var r client.Result
		select {
		case r = <-results:
		case <-ctx.Done():
			t.Fatal("not every ApplyAsync answered within 60s")
		}
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		cmd := r.Record.Command
		if r.Record.Status != "left" || cmd == nil || !cmd.Changed || cmd.Offset != r.Published.Offset ||
			cmd.Partition != r.Published.Partition || r.Record.UserID != r.Published.Command.UserID {
			t.Fatalf("receipt %s for %+v", asJSON(r.Record), r.Published)
		}
	}
	mu.Lock()
	got := slices.Clone(ids)
	mu.Unlock()
	for _, id := range got {
		if id != "cohortgate-client" && id != "cohortgate-client-receipts" {
			t.Errorf("a reader %q was made: a receipt was left to a scan of its own (clients: %q)", id, got)
		}
	}
}

// openReaders counts the scans' readers ("-read-N") open at once, and the
// most ever open, through franz-go's client hooks.
type openReaders struct {
	mu         sync.Mutex
	open, most int
	made       int
}

type readerHook struct{ r *openReaders }

func (h readerHook) OnNewClient(*kgo.Client) {
	h.r.mu.Lock()
	defer h.r.mu.Unlock()
	h.r.open++
	h.r.made++
	h.r.most = max(h.r.most, h.r.open)
}

func (h readerHook) OnClientClosed(*kgo.Client) {
	h.r.mu.Lock()
	defer h.r.mu.Unlock()
	h.r.open--
}

func (r *openReaders) hooks(id string) []kgo.Hook {
	if !strings.Contains(id, "-read-") {
		return nil
	}
	return []kgo.Hook{readerHook{r}}
}

// TestScansBounded: many waits whose answers the watcher has forgotten
// are served by at most Scans readers at once, not a reader each (a
// million such waits held tens of GB), and each gets its own command's
// receipt.
func TestScansBounded(t *testing.T) {
	brokers := processor(t)
	var readers openReaders
	c := newClient(t, client.Brokers(brokers...), client.Unclaimed(1), client.Scans(2),
		client.KafkaHooks(readers.hooks))
	ctx := timeout(t, 60*time.Second)
	const n = 60
	reqs := make([]client.Request, n)
	at := time.Now().Add(-time.Second)
	for i := range reqs {
		reqs[i] = client.Request{Op: topics.Leave, UserID: uint64(7000 + i), Opts: []client.CommandOpt{client.Intent("job-scan", at)}}
	}
	var sent []client.Published
	for _, r := range c.PublishBatch(ctx, reqs) {
		if r.Err != nil {
			t.Fatal(r.Err)
		}
		sent = append(sent, r.Published)
	}
	// The first wait starts the watcher from the earliest command; once
	// it has answered the latest, it has read and forgotten all but one.
	first, last := sent[0], sent[0]
	for _, p := range sent {
		if p.Timestamp.Before(first.Timestamp) {
			first = p
		}
		if p.Timestamp.After(last.Timestamp) {
			last = p
		}
	}
	for _, p := range []client.Published{first, last} {
		if _, err := c.WaitReceipt(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	readers.mu.Lock()
	before := readers.made
	readers.mu.Unlock()
	type result struct {
		p   client.Published
		rec topics.MemberRecord
		err error
	}
	results := make(chan result, n)
	for _, p := range sent {
		c.ReceiptAsync(ctx, p, func(rec topics.MemberRecord, err error) { results <- result{p, rec, err} })
	}
	for range n {
		var r result
		select {
		case r = <-results:
		case <-ctx.Done():
			t.Fatal("not every receipt answered within 60s")
		}
		if r.err != nil || r.rec.Command == nil || r.rec.Command.Offset != r.p.Offset ||
			r.rec.Command.Partition != r.p.Partition || r.rec.UserID != r.p.Command.UserID {
			t.Fatalf("receipt %s, %v for %+v", asJSON(r.rec), r.err, r.p)
		}
	}
	readers.mu.Lock()
	defer readers.mu.Unlock()
	if readers.made == before {
		t.Fatalf("no scan reader made: the waits were not forgotten ones, the test proves nothing")
	}
	if readers.most > 2 {
		t.Errorf("%d scan readers open at once (%d made for %d waits), want at most Scans(2)",
			readers.most, readers.made-before, n)
	}
	t.Logf("%d waits for forgotten answers: %d scan readers made, at most %d at once", n, readers.made-before, readers.most)
}

// TestCloseEndsScans: a wait left to a scan, for an answer that never
// comes, ends when the client closes, not at its deadline, and the scan's
// reader is closed.
func TestCloseEndsScans(t *testing.T) {
	brokers := processor(t)
	var readers openReaders
	c, err := client.New(client.Brokers(brokers...), client.Scans(1), client.KafkaHooks(readers.hooks))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := timeout(t, 60*time.Second)
	p, err := c.Leave(ctx, 77)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitReceipt(ctx, p); err != nil { // starts the watcher at p's timestamp
		t.Fatal(err)
	}
	// Stamped before the watcher's start: a scan's; at an offset the
	// processor never answered.
	never := p
	never.Offset += 1 << 40
	never.Timestamp = p.Timestamp.Add(-time.Minute)
	ended := make(chan error, 1)
	c.ReceiptAsync(ctx, never, func(_ topics.MemberRecord, err error) { ended <- err })
	deadline := time.Now().Add(30 * time.Second)
	for {
		readers.mu.Lock()
		open := readers.open
		readers.mu.Unlock()
		if open == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d scan readers open after 30s, want 1", open)
		}
		time.Sleep(10 * time.Millisecond)
	}
	c.Close()
	select {
	case err := <-ended:
		if err == nil || !strings.Contains(err.Error(), "closed") {
			t.Errorf("the scan's wait ended with %v, want the client closed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the scan's wait still open 10s after Close")
	}
	readers.mu.Lock()
	defer readers.mu.Unlock()
	if readers.open != 0 {
		t.Errorf("%d scan readers open after Close", readers.open)
	}
}
