package fanout

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/cockroachdb/pebble/v2/vfs"

	"github.com/cohortgate/cohortgate/pkg/gate"
)

// The gate snapshot (Config.GateSnapshot) lets a restart skip the store
// scan: the gate, saved at a clean stop, is loaded back with one
// sequential read when it still reflects the store. The store stays the
// source of truth; the snapshot is only ever a copy of what a scan would
// build, or it is not used.
//
// It reflects the store through the commands checkpoints. Every batch of
// the applier that changes a user's episodes also raises the checkpoint
// of the partition the commands came from (commands below the checkpoint,
// applied again, are duplicates that change nothing), and the gate holds
// nothing the commands did not put there. So a snapshot of the gate taken
// when it equals the store, labelled with the store's checkpoints then,
// equals the store again whenever the store's checkpoints are those of the
// label. At start the label is checked against the store's checkpoints,
// the snapshot's checksums and layout by gate.Map.Load; on any mismatch
// the gate is rebuilt by the scan, and the Restored event says why.
//
// A snapshot is written when Run ends cleanly with no command batch half
// applied (the gate is updated before the batch commits): then the gate
// equals the store. With Config.GateSnapshotInterval it is also written
// while running, by the commands side between two batches, so that a
// start after a kill -9 finds a recent one. It goes to a temporary file,
// synced, renamed over the old one and its directory synced, so that the
// path holds one whole snapshot or the previous one, never a torn one.
//
// A snapshot older than the store: every change of a user's episodes is
// made by a command of the user's partition at or above the checkpoint the
// store had before it, so a snapshot labelled with checkpoints at or below
// the store's, partition by partition, differs from the store only in
// users that a command of their partition at or above the label's offset
// touched. A start that loads one (regate) reads each partition's
// commands again from the label's offset, whatever it would read them
// from otherwise; they are duplicates to the store, and the gate takes
// each touched user's episodes from the store (updateGate), so once the
// partition is applied through the store's checkpoint its users are as
// the store holds them. Until then its signals wait, as after any
// assignment. A snapshot whose label is above the store anywhere (a batch
// the kill lost before its sync), names other partitions or another
// topic, is not used: the store is scanned.
//
// A snapshot written while running is labelled, partition by partition,
// with the lower of the store's checkpoint and the applied offset of the
// partition's claim (what is synced), and with the lower of those and the
// offset a pending regate starts from: the gate may hold batches a kill
// would lose, and the users of a partition not re-gated yet may lag.
//
// Writing the store by other means than the processor (Store.Leave, say)
// does not move the checkpoints; a snapshot would not see it. Remove the
// snapshot after such a change.

// gateSnapshot is where the gate is saved and loaded, and the commands
// topic whose checkpoints it reflects. An empty path means none. fs is the
// file system it is on (Config.Testing.SnapshotFS); nil is the operating
// system's.
type gateSnapshot struct {
	path  string
	topic string
	fs    vfs.FS
}

// files is the file system the snapshot is on.
func (s gateSnapshot) files() vfs.FS {
	if s.fs == nil {
		return vfs.Default
	}
	return s.fs
}

// SnapshotLabel is the label of a gate snapshot that reflects the given
// checkpoints of the commands topic: what a tool that writes a snapshot
// itself (the restart benchmark) must give gate.Map.Save for the
// processor to load it.
func SnapshotLabel(commands string, checkpoints map[int32]int64) []byte {
	return encodeLabel(commands, checkpoints)
}

// labelVersion is the first byte of a snapshot label.
const labelVersion = 1

// encodeLabel is the label of a snapshot that reflects checkpoints of
// topic: version (1 byte), topic length (u16 LE), topic, partition count
// (u32 LE), then per partition in ascending order the partition (u32 LE)
// and its next offset (u64 LE, two's complement).
func encodeLabel(topic string, checkpoints map[int32]int64) []byte {
	b := []byte{labelVersion}
	b = binary.LittleEndian.AppendUint16(b, uint16(len(topic)))
	b = append(b, topic...)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(checkpoints)))
	for _, p := range slices.Sorted(maps.Keys(checkpoints)) {
		b = binary.LittleEndian.AppendUint32(b, uint32(p))
		b = binary.LittleEndian.AppendUint64(b, uint64(checkpoints[p]))
	}
	return b
}

// errBadLabel is wrapped by decodeLabel's errors.
var errBadLabel = errors.New("bad snapshot label")

func decodeLabel(b []byte) (topic string, checkpoints map[int32]int64, err error) {
	if len(b) < 3 || b[0] != labelVersion {
		return "", nil, fmt.Errorf("%w: %d bytes, version %v", errBadLabel, len(b), b[:min(len(b), 1)])
	}
	n := int(binary.LittleEndian.Uint16(b[1:]))
	b = b[3:]
	if len(b) < n+4 {
		return "", nil, fmt.Errorf("%w: truncated topic", errBadLabel)
	}
	topic, b = string(b[:n]), b[n:]
	count := binary.LittleEndian.Uint32(b)
	b = b[4:]
	if uint64(len(b)) != uint64(count)*12 {
		return "", nil, fmt.Errorf("%w: %d checkpoints in %d bytes", errBadLabel, count, len(b))
	}
	checkpoints = make(map[int32]int64, count)
	for i := range int(count) {
		p := int32(binary.LittleEndian.Uint32(b[12*i:]))
		if _, dup := checkpoints[p]; dup {
			return "", nil, fmt.Errorf("%w: partition %d twice", errBadLabel, p)
		}
		checkpoints[p] = int64(binary.LittleEndian.Uint64(b[12*i+4:]))
	}
	return topic, checkpoints, nil
}

// errStale is wrapped by the error of a snapshot that does not reflect the
// store's checkpoints.
var errStale = errors.New("snapshot does not reflect the store")

// matchLabel says why a snapshot labelled label does not reflect the
// checkpoints store holds of topic, or returns nil if it does.
func matchLabel(label []byte, topic string, store map[int32]int64) error {
	behind, err := matchOlder(label, topic, store)
	if err == nil && len(behind) > 0 {
		p := slices.Min(slices.Collect(maps.Keys(behind)))
		return fmt.Errorf("%w: partition %d at offset %d in the snapshot, %d in the store", errStale, p, behind[p], store[p])
	}
	return err
}

// matchOlder is matchLabel for a snapshot that may be older than the
// store: it returns, for each partition whose label offset is below the
// store's checkpoint, the label's offset (the commands to apply again:
// see regate), or why the snapshot cannot be brought to the store.
func matchOlder(label []byte, topic string, store map[int32]int64) (map[int32]int64, error) {
	t, snap, err := decodeLabel(label)
	if err != nil {
		return nil, err
	}
	if t != topic {
		return nil, fmt.Errorf("%w: it reflects topic %q, the commands are %q", errStale, t, topic)
	}
	behind := make(map[int32]int64)
	parts := slices.Sorted(maps.Keys(store))
	for p := range snap {
		if _, ok := store[p]; !ok {
			parts = append(parts, p)
		}
	}
	slices.Sort(parts)
	for _, p := range parts {
		s, inSnap := snap[p]
		o, inStore := store[p]
		switch {
		case !inSnap:
			return nil, fmt.Errorf("%w: the store has partition %d at offset %d, the snapshot none", errStale, p, o)
		case !inStore:
			return nil, fmt.Errorf("%w: the snapshot has partition %d at offset %d, the store none", errStale, p, s)
		case s > o:
			return nil, fmt.Errorf("%w: partition %d at offset %d in the snapshot, above the store's %d", errStale, p, s, o)
		case s < o:
			behind[p] = s
		}
	}
	return behind, nil
}

// regate is what a gate loaded from a snapshot older than the store still
// owes the store: per partition, the commands offset from which they are
// applied again (re-gating each user they touch) and the store's
// checkpoint at the load, through which they must be. Shared by the
// restore (fills it), the group callbacks (start claims no later than
// from), the commands side (clears a partition once applied through
// until) and the snapshot writers (label no higher than from).
//
// A claim made while the restore runs (the group may assign partitions
// before the gate is loaded) must not start before it knows its
// partition's regate: wait returns once the restore has ended.
type regate struct {
	mu     sync.Mutex
	m      map[int32]regateRange
	loaded chan struct{} // closed once the restore ended; nil: not restoring (tests)
}

// reset forgets every pending regate and opens the wait for a restore.
func (r *regate) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.m, r.loaded = nil, make(chan struct{})
}

// finish ends the wait: the restore ended (loaded, scanned or failed).
func (r *regate) finish() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.loaded != nil {
		select {
		case <-r.loaded:
		default:
			close(r.loaded)
		}
	}
}

// wait returns once the restore ended, or ctx's error.
func (r *regate) wait(ctx context.Context) error {
	r.mu.Lock()
	ch := r.loaded
	r.mu.Unlock()
	if ch == nil {
		return nil
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

type regateRange struct{ from, until int64 }

func (r *regate) set(behind, store map[int32]int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.m = make(map[int32]regateRange, len(behind))
	for p, from := range behind {
		r.m[p] = regateRange{from: from, until: store[p]}
	}
}

// get returns partition's pending regate, if any.
func (r *regate) get(partition int32) (regateRange, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	g, ok := r.m[partition]
	return g, ok
}

// reached notes that partition's commands are applied below next: its
// regate is done once next reaches until.
func (r *regate) reached(partition int32, next int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if g, ok := r.m[partition]; ok && next >= g.until {
		delete(r.m, partition)
	}
}

// clear forgets every pending regate (the store forgot its users).
func (r *regate) clear() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.m = nil
}

// lower lowers each checkpoint of cps to its partition's pending regate's
// from.
func (r *regate) lower(cps map[int32]int64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for p, g := range r.m {
		if o, ok := cps[p]; ok && g.from < o {
			cps[p] = g.from
		}
	}
}

// pending is how many partitions still owe a regate.
func (r *regate) pending() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.m)
}

// load replaces g's contents with the snapshot if it reflects store, or
// (older true) if it can be brought to the store by applying commands
// again, returning the partitions that need it (see regate); or returns
// why not (g is then as it was).
func (s gateSnapshot) load(store Store, g *gate.Map, older bool) (behind, cps map[int32]int64, err error) {
	f, err := s.files().Open(s.path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil, fmt.Errorf("%w at %s", errNoSnapshot, s.path)
	}
	if err != nil {
		return nil, nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, nil, err
	}
	if cps, err = store.Checkpoints(s.topic); err != nil {
		return nil, nil, err
	}
	err = g.Load(f, st.Size(), func(label []byte) error {
		if !older {
			return matchLabel(label, s.topic, cps)
		}
		var err error
		behind, err = matchOlder(label, s.topic, cps)
		return err
	})
	if err != nil {
		return nil, nil, err
	}
	return behind, cps, nil
}

// save writes g, labelled with the store's checkpoints, each lowered by
// lower when it is not nil, to the path, atomically: freeze, then write.
// g must reflect the store through the label (see regate) and nothing may
// change either while freeze runs.
func (s gateSnapshot) save(store Store, g *gate.Map, lower func(cps map[int32]int64)) (SnapshotInfo, error) {
	f, info, err := s.freeze(store, g, lower)
	if err != nil {
		return info, err
	}
	return s.write(f, info)
}

// frozenGate is the gate and its label at one moment, to be written to
// the path by write: a copy as large as the gate's table, until written.
type frozenGate struct {
	gate  *gate.Snapshot
	label []byte
	start time.Time
}

// freeze copies g, labelled with the store's checkpoints, each lowered
// by lower when it is not nil. g must reflect the store through the label
// (see regate) and nothing may change either while it runs; once it has
// returned, they may (write takes the copy).
func (s gateSnapshot) freeze(store Store, g *gate.Map, lower func(cps map[int32]int64)) (frozenGate, SnapshotInfo, error) {
	start := time.Now()
	info := SnapshotInfo{Path: s.path, Members: g.Len()}
	cps, err := store.Checkpoints(s.topic)
	if err != nil {
		return frozenGate{}, info, fmt.Errorf("unable to read the checkpoints: %w", err)
	}
	if lower != nil {
		lower(cps)
	}
	snap := g.Snapshot()
	info.Members, info.Held = snap.Len(), time.Since(start)
	return frozenGate{gate: snap, label: encodeLabel(s.topic, cps), start: start}, info, nil
}

// write writes f to the path, atomically, and releases it. It may run on
// any goroutine, one at a time.
func (s gateSnapshot) write(f frozenGate, info SnapshotInfo) (SnapshotInfo, error) {
	defer f.gate.Release()
	fs := s.files()
	dir, base := fs.PathDir(s.path), fs.PathBase(s.path)
	// A save cut short by a kill leaves its temporary file: remove those
	// first, they are as large as the snapshot.
	removeTemps(fs, dir, base)
	tmp := fs.PathJoin(dir, fmt.Sprintf("%s.tmp-%d", base, rand.Uint64()))
	f2, err := fs.Create(tmp, vfs.WriteCategoryUnspecified)
	if err != nil {
		return info, fmt.Errorf("unable to write the gate snapshot %s: %w", s.path, err)
	}
	defer fs.Remove(tmp) // fails harmlessly once renamed
	if s.fs == nil {
		// It names every user who ever left: readable by its owner
		// alone, whatever the umask (vfs creates files 0666).
		if err := os.Chmod(tmp, 0o600); err != nil {
			f2.Close()
			return info, fmt.Errorf("unable to write the gate snapshot %s: %w", s.path, err)
		}
	}
	w := bufio.NewWriterSize(f2, 1<<20)
	n, err := f.gate.Save(w, f.label)
	if err == nil {
		err = w.Flush()
	}
	if err == nil {
		err = f2.Sync()
	}
	if cerr := f2.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = fs.Rename(tmp, s.path)
	}
	if err == nil {
		err = syncDir(fs, dir)
	}
	if err != nil {
		return info, fmt.Errorf("unable to write the gate snapshot %s: %w", s.path, err)
	}
	info.Bytes, info.Took = n, time.Since(f.start)
	return info, nil
}

// removeTemps removes the temporary files of snapshots named base in dir
// that saves cut short left behind.
func removeTemps(fs vfs.FS, dir, base string) {
	names, err := fs.List(dir)
	if err != nil {
		return
	}
	for _, name := range names {
		if strings.HasPrefix(name, base+".tmp-") {
			_ = fs.Remove(fs.PathJoin(dir, name))
		}
	}
}

// syncDir makes a rename in dir durable.
func syncDir(fs vfs.FS, dir string) error {
	d, err := fs.OpenDir(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
