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
//
// It also compares the outputs' topic IDs with those found at start
// (topicids.go), even when the layout is not compared: a client of the
// old topic can never produce to a new one.
type watcher struct {
	interval time.Duration
	found    layout
	outputs  outputIDs // the outputs' IDs found at start
	topics   topics.Set
	list     func(ctx context.Context, names []string) (kadm.TopicDetails, error)
	log      *slog.Logger
	off      bool // Config.Testing.UnsafeIgnoreTopology: compare nothing
}

func (w *watcher) run(ctx context.Context) error {
	var names []string
	if w.off {
		w.log.Warn("UNSAFE: the topics are not compared with their layout while running")
	} else {
		names = append(names, string(w.topics.Commands), string(w.topics.Changelog))
		for _, in := range w.topics.Inputs() {
			names = append(names, string(in))
		}
	}
	names = append(names, outputNames(w.topics)...)
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
		var changes []string
		if !w.off {
			if now := layoutOf(w.topics, details); !now.equal(w.found) {
				changes = w.found.changes(now)
			}
		}
		changes = append(changes, w.outputs.changes(outputIDsOf(w.topics, details))...)
		if len(changes) == 0 {
			missing = false
			continue
		}
		if len(details) < len(names) && !missing {
			missing = true
			continue
		}
		return &TopologyChangedError{Changes: changes}
	}
}
