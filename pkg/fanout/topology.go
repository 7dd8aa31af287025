package fanout

import (
	"context"
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"

	"github.com/cohortgate/cohortgate/topics"
)

// watcher compares, every interval, the topics the state depends on with
// the layout found at start (layout.go): a partition count grown, a topic
// deleted or created again under its name. A change ends the run with a
// TopologyChangedError, at once: every partition stops forwarding, and Run
// starts again under the new layout. A listing that fails is tried again
// at the next tick (the partitions go on meanwhile: the layout they were
// claimed under is the last one known). A topic missing from a listing is
// believed gone only when the next listing misses it too: counts only
// grow, but a broker may briefly not know a topic it has.
type watcher struct {
	interval time.Duration
	found    layout
	topics   topics.Set
	list     func(ctx context.Context, names []string) (kadm.TopicDetails, error)
	log      *slog.Logger
	off      bool // Config.UnsafeIgnoreTopology: compare nothing
}

func (w *watcher) run(ctx context.Context) error {
	if w.off {
		w.log.Warn("UNSAFE: the topics are not compared with their layout while running")
		return nil
	}
	names := []string{string(w.topics.Commands), string(w.topics.Changelog)}
	for _, in := range w.topics.Inputs() {
		names = append(names, string(in))
	}
	t := time.NewTicker(w.interval)
	defer t.Stop()
	missing := false
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		details, err := w.list(ctx, names)
		if err != nil {
			if ctx.Err() == nil {
				w.log.Warn("unable to compare the topics with their layout", "err", err)
			}
			continue
		}
		now := layoutOf(w.topics, details)
		if now.equal(w.found) {
			missing = false
			continue
		}
		if len(details) < len(names) && !missing {
			missing = true
			continue
		}
		return &TopologyChangedError{Changes: w.found.changes(now)}
	}
}
