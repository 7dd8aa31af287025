package fanout

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
)

// CommandsGapError halts the processor: commands of a partition cannot be
// read from where the store says the next one is. Forwarding on would mean
// forwarding signals of users whose leave was skipped.
type CommandsGapError struct {
	Topic     string
	Partition int32
	Next      int64 // the store's checkpoint (next offset to apply), -1 if unknown
	End       int64 // the log end observed, -1 if unknown
	Err       error
}

func (e *CommandsGapError) Error() string {
	var what string
	switch {
	case e.End >= 0 && e.Next >= 0:
		what = fmt.Sprintf("log end %d is below the local checkpoint %d", e.End, e.Next)
	case e.Err != nil:
		what = e.Err.Error()
	default:
		what = "the position is not in the log"
	}
	return fmt.Sprintf("commands topic %s partition %d: %s; the topic was probably deleted and recreated, "+
		"or lost data. The local state no longer matches it. Way out: stop every processor, then either "+
		"restore the topic, or start each processor with an empty data directory (state is rebuilt from "+
		"the commands topic as it is now)", e.Topic, e.Partition, what)
}

func (e *CommandsGapError) Unwrap() error { return e.Err }

func isOffsetOutOfRange(err error) bool { return errors.Is(err, kerr.OffsetOutOfRange) }

// track observes, every AlignInterval, the last stable offset of every
// owned commands partition, stamped with the wall-clock time the request
// was sent. These observations release held signals (see watermarks) and
// mark a partition caught up after assignment.
func (p *Processor) track(ctx context.Context) error {
	t := time.NewTicker(p.cfg.AlignInterval)
	defer t.Stop()
	topic := string(p.cfg.Topics.Commands)
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		cs := p.claims.all()
		if len(cs) == 0 {
			continue
		}
		// Applied offsets are read before sending: an applied offset
		// never exceeds the end the broker reports afterwards, so a
		// report below it proves the log went backwards.
		before := make([]int64, len(cs))
		for i, c := range cs {
			before[i] = c.applied.Load()
		}
		sent := p.cfg.Now().UnixNano()
		listed, err := p.adm.ListCommittedOffsets(ctx, topic)
		if err != nil {
			if ctx.Err() == nil {
				p.log.Warn("unable to observe commands end offsets", "err", err)
			}
			continue
		}
		for i, c := range cs {
			lo, ok := listed.Lookup(topic, c.partition)
			if !ok || lo.Err != nil {
				continue
			}
			prev, regressed := c.marks.observe(observation{sentNs: sent, end: lo.Offset})
			if regressed || lo.Offset < before[i] {
				next := before[i]
				if regressed && prev > next {
					next = prev
				}
				return &CommandsGapError{Topic: topic, Partition: c.partition, Next: next, End: lo.Offset}
			}
			p.markCaughtUp(c)
		}
	}
}

func (p *Processor) markCaughtUp(c *claim) {
	if c.caughtUp.Load() {
		return
	}
	if _, ok := c.marks.through(c.applied.Load(), c.assignedNs); ok {
		c.caughtUp.Store(true)
		p.log.Info("partition caught up with its commands; forwarding",
			"partition", c.partition, "applied", c.applied.Load(),
			"took", time.Duration(p.cfg.Now().UnixNano()-c.assignedNs).String())
	}
}
