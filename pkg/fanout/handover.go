package fanout

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/cohortgate/cohortgate/pkg/gate"
	"github.com/cohortgate/cohortgate/pkg/membership"
)

// A new owner whose store holds nothing of a partition (a new instance, a
// replaced disk) would replay the partition's commands from offset 0
// before forwarding any of its signals: minutes for millions of commands.
// Instead it restores the partition's users from the changelog, the way a
// Kafka Streams task restores a store from its changelog, and consumes
// the commands from where the previous owners had judged them.
//
// Each changelog record carries, in its topics.HeaderRestore header, the
// offset of the command it follows and the user's whole stored state as
// pkg/membership dumps it: state, history, late-leave windows, note, and
// the identity of every command applied to the user or refused. The
// identities are what make the restore exact: without them a command
// delivered again after the handover (a leave re-published after the
// user's rejoin, say) would be applied as a new one and reopen a closed
// episode, which a replay never does (rule C5). A refused rejoin writes a
// record too (commands.go), so that its identity is in the changelog.
//
// Why the restored state equals a replay's. Let J be the judged offset of
// the partition's offset metadata: every command below J that the store
// took (applied, a duplicate, or refused) had its changelog record
// committed with that metadata (claim.meta). So each user's latest record
// follows a command at or after the user's last command below J, and says
// which one (offset o): it is the user's stored state after every command
// of the user through o, because application is deterministic and every
// record is written from the store of an owner that applied all of them.
// The new owner imports that state and applies, from J on, only the
// user's commands after o (claim.reflected): a replay applies the same
// commands to the same state. Late-leave windows, which are not a
// function of the commands, are recovered from every record read and
// attached as a replay's recovery attaches them (recover.go). Receipts in
// the notes are those of the owner that applied the command, where a
// replay's would restate its own clock.
//
// The changelog must hold every user's latest record, or a user would be
// restored as if it had none. The restore is used only when that holds as
// far as the processor can see, and otherwise the partition is replayed
// from offset 0 and the HandoverInfo says why:
//
//   - the offset metadata names the changelog's topic ID, and it is the
//     changelog's now (claim.changelogID: not deleted and created again
//     since the partition's first command);
//   - its cleanup.policy is compact alone (delete would drop records) and
//     no partition read starts above offset 0 (DeleteRecords);
//   - it is read read_committed to its last stable offset, so every record
//     that committed with the metadata is read;
//   - the commands partition reaches the judged offset (it was not
//     created again since);
//   - every user's latest record has a restore header that decodes: a
//     tombstone, a record written by an older version, or one trimmed to
//     fit the topic (history_omitted) has none.
//
// Until the restore is done the partition's applied offset stays at 0, so
// its signals wait (fail closed); the state is imported, with the
// commands checkpoint at J, all or nothing (table files ingested
// together, membership.Import), before the gate learns it. The applier, which does
// it, applies no other partition's commands meanwhile.

// decodedChunk is a chunk of users' dumps decoded from their restore
// headers, with the commands offsets the records follow, or the error of
// the first that did not decode.
type decodedChunk struct {
	dumps   []membership.Dump
	offsets []int64
	err     error
}

// decodeChunk decodes the restore headers of users.
func decodeChunk(headers map[uint64][]byte, users []uint64) decodedChunk {
	ch := decodedChunk{dumps: make([]membership.Dump, 0, len(users)), offsets: make([]int64, 0, len(users))}
	for _, user := range users {
		offset, raw, err := parseRestoreHeader(headers[user])
		var d membership.Dump
		if err == nil {
			d, err = membership.DecodeDump(raw)
		}
		if err == nil && d.Member.UserID != user {
			err = errors.New("restore header of another user under a record's key")
		}
		if err != nil {
			ch.err = err
			return ch
		}
		ch.dumps = append(ch.dumps, d)
		ch.offsets = append(ch.offsets, offset)
	}
	return ch
}

// restoreHeaderVersion is the first byte of a restore header, followed by
// the commands offset the record follows (u64 BE) and the user's dump.
const restoreHeaderVersion = 1

// appendRestoreHeader appends the head of a restore header for a record
// following the command at offset; the dump follows.
func appendRestoreHeader(dst []byte, offset int64) []byte {
	dst = append(dst, restoreHeaderVersion)
	return binary.BigEndian.AppendUint64(dst, uint64(offset))
}

// parseRestoreHeader splits a restore header.
func parseRestoreHeader(h []byte) (offset int64, dump []byte, err error) {
	if len(h) < 1+8 || h[0] != restoreHeaderVersion {
		return 0, nil, fmt.Errorf("restore header of %d bytes, version %d", len(h), firstByte(h))
	}
	offset = int64(binary.BigEndian.Uint64(h[1:9]))
	if offset < 0 {
		return 0, nil, fmt.Errorf("restore header with offset %d", offset)
	}
	return offset, h[9:], nil
}

func firstByte(b []byte) int {
	if len(b) == 0 {
		return -1
	}
	return int(b[0])
}

// restorer restores claims from the changelog for the commands side,
// which owns it.
type restorer struct {
	cfg   *Config
	store Store
	gate  *gate.Map
	rec   *recoverer // its source reads the changelog
	ev    EventListener
	// seek moves the commands consumer of part to offset; nil in tests.
	seek func(part int32, offset int64)
}

// handover restores claim c from the changelog if it can, and otherwise
// leaves it to replay its commands from offset 0. end is the commands
// partition's high watermark as its first fetch saw it. Only a store
// failure is an error.
func (a *restorer) handover(ctx context.Context, c *claim, end int64) error {
	start := time.Now()
	info := HandoverInfo{Partition: c.partition, Source: "changelog", From: c.judgedBelow}
	why, err := a.restore(ctx, c, end, &info)
	if err != nil {
		return err
	}
	if why != nil {
		if ctx.Err() != nil {
			return nil
		}
		a.ev.Handover(HandoverInfo{Partition: c.partition, Source: "replay", Reason: why})
		return nil
	}
	info.Took = time.Since(start)
	a.ev.Handover(info)
	return nil
}

// restore restores claim c from the changelog, returning why not when it
// did not (and changed nothing then).
func (a *restorer) restore(ctx context.Context, c *claim, end int64, info *HandoverInfo) (why, err error) {
	switch {
	case end < c.judgedBelow:
		// The commands topic was deleted and created again, or lost
		// records: the changelog reflects commands it no longer has.
		return fmt.Errorf("the commands partition ends at offset %d, below the judged offset %d", end, c.judgedBelow), nil
	case a.cfg.HandoverReplay:
		return errors.New("configured to replay (HandoverReplay)"), nil
	case a.rec.skip:
		return errors.New("late-leave window recovery is off (UnsafeNoWindowRecovery)"), nil
	case c.changelogID == noChangelogID:
		return errors.New("the offset metadata does not name the changelog that holds the records of every " +
			"command judged (written by an older version, or the changelog was created again since)"), nil
	}
	read := time.Now()
	rctx, cancel := context.WithTimeout(ctx, recoveryTimeout)
	view, err := a.rec.src.read(rctx, c.partition, true)
	cancel()
	if err != nil {
		return fmt.Errorf("unable to read the changelog: %w", err), nil
	}
	info.Read = time.Since(read)
	if view.lossy != nil {
		return view.lossy, nil
	}

	users := make([]uint64, 0, len(view.restore))
	missing := 0
	for user, h := range view.restore {
		if h == nil {
			missing++
			continue
		}
		users = append(users, user)
	}
	if missing > 0 {
		return fmt.Errorf("%d users' latest changelog records carry no restore header (written by an older "+
			"version, trimmed to fit with history_omitted, or tombstones)", missing), nil
	}
	// In user order: the import writes sorted table files as it goes.
	slices.Sort(users)
	im := a.store.NewImport()
	defer im.Close()
	reflected := make(map[uint64]int64)
	var (
		gated []uint64 // users with episodes, and their episodes in eps
		ends  []int
		geps  []gate.Episode
		meps  []membership.Episode
	)
	// Decoding and writing each take about half the time: a goroutine
	// decodes chunks of users while this one writes them, joined before
	// restore returns.
	chunks := make(chan decodedChunk, 2)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer close(chunks)
		for from := 0; from < len(users); from += restoreChunk {
			ch := decodeChunk(view.restore, users[from:min(from+restoreChunk, len(users))])
			select {
			case chunks <- ch:
			case <-stop:
				return
			}
			if ch.err != nil {
				return
			}
		}
	}()
	defer wg.Wait()
	defer close(stop)
	for ch := range chunks {
		if ch.err != nil {
			return fmt.Errorf("a user's restore header does not decode: %w", ch.err), nil
		}
		for i, d := range ch.dumps {
			if a.cfg.UnsafeRestoreWithoutIdentities {
				d = d.WithoutIdentities()
			}
			if err := im.Put(d); err != nil {
				return nil, err
			}
			if offset := ch.offsets[i]; offset >= c.judgedBelow {
				reflected[d.Member.UserID] = offset
			}
			if meps = d.Member.Episodes(meps[:0]); len(meps) > 0 {
				gated = append(gated, d.Member.UserID)
				geps = gateEpisodes(geps, meps)
				ends = append(ends, len(geps))
			}
		}
	}
	if err := im.SetCheckpoint(string(a.cfg.Topics.Commands), c.partition, c.judgedBelow); err != nil {
		return nil, err
	}
	if err := im.Commit(); err != nil {
		return nil, fmt.Errorf("unable to store the users restored from the changelog: %w", err)
	}
	from := 0
	for i, user := range gated {
		if err := a.gate.Set(user, geps[from:ends[i]]); err != nil {
			return nil, fmt.Errorf("unable to gate user %d: %w", user, err)
		}
		from = ends[i]
	}
	c.recovery.done = true
	if err := a.rec.attachAll(view.windows, &c.recovery); err != nil {
		return nil, err
	}
	c.reflected = reflected
	info.Users, info.Records, info.Windows, info.Reflected = len(users), view.stats.records, view.stats.windows, len(reflected)
	// The signals wait for applied to pass the commands' end, so it
	// moves only now that the store and the gate hold the users.
	c.applied.Store(c.judgedBelow)
	if a.seek != nil {
		a.seek(c.partition, c.judgedBelow)
	}
	return nil, nil
}
