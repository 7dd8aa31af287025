package fanout

import (
	"context"
	"sync"
	"time"
)

// What restores side by side report and share: their progress, for
// /v1/partitions and the log, and a budget of the memory they hold.

// The phases of a restore, as restoreProgress reports them.
const (
	phaseReadChangelog = "reading the changelog"
	phaseCheckLeavers  = "reading the commands for the users who left"
	// phaseMerge: more files of spilled headers than a merge reads at
	// once, merged into fewer (restorespill.go).
	phaseMerge = "merging the spilled restore headers"
	phaseWrite = "writing the users' records"
	phaseGate  = "ingesting and setting the gate"
)

// restoreProgressEvery is how often a restore's progress is reported
// (RestoreProgress events, and so the log) while it reads.
const restoreProgressEvery = 5 * time.Second

// restoreProgress is how far a claim's restore from the changelog is:
// written by the restore, read for PartitionStatus at any time. A nil
// *restoreProgress takes every call and keeps nothing.
type restoreProgress struct {
	report func(RestoreProgressInfo) // the RestoreProgress event; set before the restore starts
	mu     struct {
		sync.Mutex
		on       bool // a restore runs
		info     RestoreProgressInfo
		started  time.Time // the restore's start
		phaseAt  time.Time // the phase's start: rates are over it
		reported time.Time
	}
}

// begin starts reporting a restore of partition.
func (p *restoreProgress) begin(partition int32) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	now := time.Now()
	p.mu.on, p.mu.started, p.mu.phaseAt, p.mu.reported = true, now, now, now
	p.mu.info = RestoreProgressInfo{Partition: partition, BytesTotal: -1}
}

// end stops reporting: the restore is done, or did not happen.
func (p *restoreProgress) end() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mu.on = false
}

// setPhase says the restore is in phase, with nothing to count.
func (p *restoreProgress) setPhase(phase string) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mu.phaseAt = time.Now()
	i := &p.mu.info
	i.Phase, i.Records, i.RecordsTotal, i.Bytes, i.BytesTotal = phase, 0, 0, 0, -1
}

// reading says the restore reads records offsets in phase, of bytes
// bytes (-1: unknown).
func (p *restoreProgress) reading(phase string, records, bytes int64) {
	if p == nil {
		return
	}
	p.setPhase(phase)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.mu.info.RecordsTotal, p.mu.info.BytesTotal = records, bytes
}

// advance says records offsets and bytes bytes of the phase's are read,
// and reports the progress when it was last reported restoreProgressEvery
// ago.
func (p *restoreProgress) advance(records, bytes int64) {
	if p == nil {
		return
	}
	p.mu.Lock()
	p.mu.info.Records, p.mu.info.Bytes = records, bytes
	now := time.Now()
	report := p.report != nil && now.Sub(p.mu.reported) >= restoreProgressEvery
	if report {
		p.mu.reported = now
	}
	info := p.infoLocked(now)
	p.mu.Unlock()
	if report {
		p.report(info)
	}
}

// reportNow reports the progress as it is: at the end of a phase that
// read records, so that the log has each read's figures whatever its
// length.
func (p *restoreProgress) reportNow() {
	if p == nil || p.report == nil {
		return
	}
	p.mu.Lock()
	now := time.Now()
	p.mu.reported = now
	info := p.infoLocked(now)
	p.mu.Unlock()
	p.report(info)
}

// current returns the progress, and false when no restore runs.
func (p *restoreProgress) current() (RestoreProgressInfo, bool) {
	if p == nil {
		return RestoreProgressInfo{}, false
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.infoLocked(time.Now()), p.mu.on
}

func (p *restoreProgress) infoLocked(now time.Time) RestoreProgressInfo {
	i := p.mu.info
	i.Elapsed = now.Sub(p.mu.started)
	if d := now.Sub(p.mu.phaseAt).Seconds(); d > 0 {
		i.RecordsPerSecond, i.BytesPerSecond = float64(i.Records)/d, float64(i.Bytes)/d
	}
	return i
}

// restoreBytesPerRecord is what a restore holds per changelog record
// read, as a memory budget counts it before the read: a restore header
// of a user with a leave and a rejoin (about 300 bytes) and its entry.
// The records are counted as the commands judged: each wrote one.
const restoreBytesPerRecord = 330

// memBudget bounds the bytes that restores side by side hold at once: a
// weighted semaphore whose waiters say what they wait for.
type memBudget struct {
	capacity int64
	mu       struct {
		sync.Mutex
		held  int64
		freed chan struct{} // closed when bytes are given back
	}
}

func newMemBudget(capacity int64) *memBudget {
	b := &memBudget{capacity: capacity}
	b.mu.freed = make(chan struct{})
	return b
}

// acquire takes n bytes (the whole capacity when n is more: a restore
// alone always runs), waiting while others hold too much; waiting is
// told what they hold, once, when it must wait. release gives them
// back; it may be called more than once.
func (b *memBudget) acquire(ctx context.Context, n int64, waiting func(held int64)) (release func(), err error) {
	if b == nil {
		return func() {}, nil
	}
	n = max(min(n, b.capacity), 0)
	told := false
	for {
		b.mu.Lock()
		if b.mu.held == 0 || b.mu.held+n <= b.capacity {
			b.mu.held += n
			b.mu.Unlock()
			var once sync.Once
			return func() { once.Do(func() { b.give(n) }) }, nil
		}
		held, freed := b.mu.held, b.mu.freed
		b.mu.Unlock()
		if !told {
			waiting(held)
			told = true
		}
		select {
		case <-freed:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// more takes n more bytes if b has them now, without waiting: a restore
// that holds what it took and would hold more (rather than spill).
func (b *memBudget) more(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.mu.held+n > b.capacity {
		return false
	}
	b.mu.held += n
	return true
}

func (b *memBudget) give(n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.mu.held -= n
	close(b.mu.freed)
	b.mu.freed = make(chan struct{})
}
