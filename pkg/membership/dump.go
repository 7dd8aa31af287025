package membership

import (
	"bytes"
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"slices"

	"github.com/cockroachdb/pebble/v2"
	"github.com/cockroachdb/pebble/v2/objstorage/objstorageprovider"
	"github.com/cockroachdb/pebble/v2/sstable"
	"github.com/cockroachdb/pebble/v2/vfs"
)

// A dump is every record the store keeps of one user, in one value: its
// current state, history, late-leave windows and note (the users key
// space) and the identities of every command applied to it or refused
// (the identities space). [Batch.AppendDump] makes one; an [Import] writes
// dumps into another store, byte for byte, so that a store can be rebuilt
// from dumps kept elsewhere (the processor keeps each user's latest one in
// a header of its changelog record) without replaying the commands: the
// identities come along, so a command delivered again after the import is
// still a duplicate (rule C5).
//
// Layout, version 2:
//
//	version (1 byte, 0x02) ‖ user_id u64 BE
//	‖ n uvarint ‖ n × (key uvarint length ‖ key ‖ value uvarint length ‖ value)
//	‖ m uvarint ‖ m × (identity digest (16 bytes) ‖ seq u64 BE ‖ flags (1 byte))
//
// where each key is a users-space key with its space byte and user ID
// taken off (the tag and suffix), in key order, the digests ascend, and
// seq and flags are the identity record's value (encoding.go), so that
// the window of identities is forgotten in the same order after an
// import as before. Version 1 (before the window) had the digests alone;
// it decodes with every identity at seq 0, not refused. A decoder checks
// every record as Restore does and the whole as one member, and rejects
// trailing bytes.
const dumpVersion = 2

// dumpIdentityLen is the bytes of one identity in a dump of version 2,
// and dumpIdentityLenV1 in one of version 1.
const (
	dumpIdentityLen   = identityDigestLen + identityValueLen
	dumpIdentityLenV1 = identityDigestLen
)

// maxDumpRecords bounds the records and identities a dump may claim to
// hold, so that a hostile length cannot make a decoder allocate much: a
// user has at most a few records per command, and a dump is carried in one
// Kafka record.
const maxDumpRecords = 1 << 20

// AppendDump appends the dump of userID's records as the batch would
// commit them to dst. It claims the user. A user without records dumps as
// a dump of no records and no identities.
func (b *Batch) AppendDump(dst []byte, userID uint64) (_ []byte, err error) {
	if err := b.claim(userID); err != nil {
		return dst, err
	}
	defer b.s.guard(fmt.Sprintf("dump user %d", userID), &err)
	out, err := appendDump(b.pb, dst, userID)
	if err != nil {
		return dst, b.s.storageErr(fmt.Sprintf("dump user %d", userID), err)
	}
	return out, nil
}

// MemberDump returns what Member and AppendDump return, from one read of
// the user's records: the member, and dst with the user's dump appended. It
// claims the user.
func (b *Batch) MemberDump(dst []byte, userID uint64) (_ Member, _ []byte, err error) {
	if err := b.claim(userID); err != nil {
		return Member{}, dst, err
	}
	defer b.s.guard(fmt.Sprintf("read user %d", userID), &err)
	var recs dumpRecords
	m, err := readUser(b.pb, userID, &b.bounds, &recs)
	if err != nil {
		return Member{}, dst, b.s.storageErr(fmt.Sprintf("read user %d", userID), err)
	}
	out, err := appendDumpOf(b.pb, dst, userID, &recs)
	if err != nil {
		return Member{}, dst, b.s.storageErr(fmt.Sprintf("dump user %d", userID), err)
	}
	return m, out, nil
}

// appendDump appends the dump of userID's records in r to dst.
func appendDump(r reader, dst []byte, userID uint64) ([]byte, error) {
	var recs dumpRecords
	it, err := r.NewIter(&pebble.IterOptions{
		LowerBound: appendStateKey(nil, userID),
		UpperBound: appendUserUpperBound(nil, userID),
	})
	if err != nil {
		return dst, err
	}
	for valid := it.First(); valid; valid = it.Next() {
		v, err := it.ValueAndErr()
		if err != nil {
			break // reported by it.Close
		}
		recs.add(it.Key(), v)
	}
	if err := it.Close(); err != nil {
		return dst, err
	}
	return appendDumpOf(r, dst, userID, &recs)
}

// appendDumpOf appends to dst the dump of userID whose users-space records
// are recs, reading the user's identities in r.
func appendDumpOf(r reader, dst []byte, userID uint64, recs *dumpRecords) ([]byte, error) {
	dst = append(dst, dumpVersion)
	dst = binary.BigEndian.AppendUint64(dst, userID)
	dst = binary.AppendUvarint(dst, uint64(recs.n))
	dst = append(dst, recs.b...)

	lower, upper := identityBounds(userID)
	it, err := r.NewIter(&pebble.IterOptions{LowerBound: lower, UpperBound: upper})
	if err != nil {
		return dst, err
	}
	var ids []byte
	m := 0
	for valid := it.First(); valid; valid = it.Next() {
		k := it.Key()
		if len(k) != identityKeyLen {
			_ = it.Close()
			return dst, corruptf(k, "identity key has %d bytes, want %d", len(k), identityKeyLen)
		}
		v, err := it.ValueAndErr()
		if err != nil {
			break // reported by it.Close
		}
		seq, r, err := decodeIdentityValue(v)
		if err != nil {
			_ = it.Close()
			return dst, corruptf(k, "%v", err)
		}
		ids = append(ids, k[1+8:]...)
		ids = appendIdentityValue(ids, seq, r)
		m++
	}
	if err := it.Close(); err != nil {
		return dst, err
	}
	dst = binary.AppendUvarint(dst, uint64(m))
	return append(dst, ids...), nil
}

// identityBounds returns the bounds of userID's identity keys.
func identityBounds(userID uint64) (lower, upper []byte) {
	lower = binary.BigEndian.AppendUint64([]byte{spaceIdentities}, userID)
	if userID == ^uint64(0) {
		return lower, []byte{spaceIdentities + 1}
	}
	return lower, binary.BigEndian.AppendUint64([]byte{spaceIdentities}, userID+1)
}

// Dump is a decoded dump: the member it holds and its records, ready to be
// written.
type Dump struct {
	// Member is the user's state, history, late-leave windows and note,
	// validated as Restore validates them. Its slices are its own.
	Member Member
	// Identities is how many command identities the dump holds.
	Identities int

	asm     *assembler // Decode's, kept from one Decode to the next
	raw     []byte     // the dump
	records int        // users-space records in raw
	ids     int        // where the identities start in raw
	idLen   int        // bytes per identity in raw: dumpIdentityLen, or dumpIdentityLenV1
}

// WithoutIdentities returns d without its command identities, so that an
// Import of it forgets which commands the user saw. It exists only for a
// control run that shows what that breaks (rule C5); never use it
// otherwise.
func (d Dump) WithoutIdentities() Dump {
	d.Identities = 0
	return d
}

// each calls fn with the full key and the value of every record of d:
// those of the users space, or of the identities space. The keys are
// built in buf, which fn must not keep. d was checked by DecodeDump.
func (d *Dump) each(space byte, buf []byte, fn func(key, value []byte) error) error {
	key := append(buf[:0], space)
	key = binary.BigEndian.AppendUint64(key, d.Member.UserID)
	if space == spaceIdentities {
		var val []byte
		for i := range d.Identities {
			at := d.ids + i*d.idLen
			if d.idLen == dumpIdentityLen {
				val = d.raw[at+identityDigestLen : at+dumpIdentityLen]
			}
			if err := fn(append(key, d.raw[at:at+identityDigestLen]...), val); err != nil {
				return err
			}
		}
		return nil
	}
	rest := d.raw[1+8:]
	_, k := binary.Uvarint(rest)
	rest = rest[k:]
	for range d.records {
		l, k := binary.Uvarint(rest)
		suffix := rest[k : k+int(l)]
		rest = rest[k+int(l):]
		l, k = binary.Uvarint(rest)
		value := rest[k : k+int(l)]
		rest = rest[k+int(l):]
		if err := fn(append(key, suffix...), value); err != nil {
			return err
		}
	}
	return nil
}

// DecodeDump decodes and checks a dump made by Batch.AppendDump. A dump
// that does not decode exactly (an unknown version, a length past the end,
// a record Restore would refuse, identities out of order, trailing bytes)
// is an error wrapping ErrCorrupt. The Dump shares no memory with b.
func DecodeDump(b []byte) (Dump, error) {
	var d Dump
	if err := d.Decode(bytes.Clone(b)); err != nil {
		return Dump{}, err
	}
	if len(d.Member.History) == 0 {
		d.Member.History = nil
	}
	if len(d.Member.LateLeaves) == 0 {
		d.Member.LateLeaves = nil
	}
	return d, nil
}

// Decode decodes and checks the dump b into d, as DecodeDump does, but
// without copying anything: afterwards d refers to b (the records an
// Import writes, Member.Note), so b must not change while d is in use,
// and Member.History and Member.LateLeaves reuse the arrays of d's
// previous decode. A restore of millions of users decodes them all into
// one Dump with no allocation per user. On error, d holds no member.
func (d *Dump) Decode(b []byte) error {
	a := d.asm
	if a == nil {
		a = &assembler{noteInPlace: true, emit: func(*Member) error { return nil }}
	}
	hist, late := d.Member.History[:0], d.Member.LateLeaves[:0]
	*d = Dump{asm: a}
	name := []byte("dump")
	if len(b) < 1+8 {
		return corruptf(name, "dump has %d bytes, want at least 9", len(b))
	}
	idLen := dumpIdentityLen
	switch b[0] {
	case dumpVersion:
	case 1:
		idLen = dumpIdentityLenV1
	default:
		return corruptf(name, "dump version %d, want 1 or %d", b[0], dumpVersion)
	}
	user := binary.BigEndian.Uint64(b[1:9])
	rest := b[9:]
	next := func(what string) ([]byte, error) {
		l, k := binary.Uvarint(rest)
		if k <= 0 || l > uint64(len(rest)-k) {
			return nil, corruptf(name, "dump of user %d: %s length past the end", user, what)
		}
		out := rest[k : k+int(l)]
		rest = rest[k+int(l):]
		return out, nil
	}
	count := func(what string) (int, error) {
		n, k := binary.Uvarint(rest)
		if k <= 0 || n > maxDumpRecords {
			return 0, corruptf(name, "dump of user %d: bad %s count", user, what)
		}
		rest = rest[k:]
		return int(n), nil
	}
	n, err := count("record")
	if err != nil {
		return err
	}
	// The assembler starts each member with the arrays of the last; the
	// member it emits stays in a.m.
	a.have = false
	a.m = Member{CommunityMembership: CommunityMembership{UserID: user}, History: hist, LateLeaves: late}
	var bufs [2][64]byte
	var prev []byte
	for i := range n {
		k, err := next("key")
		if err != nil {
			return err
		}
		v, err := next("value")
		if err != nil {
			return err
		}
		key := appendUserKey(bufs[i%2][:0], user, 0)[:1+8]
		key = append(key, k...)
		if prev != nil && bytes.Compare(key, prev) <= 0 {
			return corruptf(key, "dump of user %d: record out of key order", user)
		}
		if uid, _, _, err := decodeUserKey(key); err != nil {
			return err
		} else if uid != user {
			return corruptf(key, "dump of user %d holds a record of user %d", user, uid)
		}
		if err := a.add(key, v); err != nil {
			return err
		}
		prev = key
	}
	if err := a.finish(); err != nil {
		return err
	}
	ids, err := count("identity")
	if err != nil {
		return err
	}
	if ids*idLen != len(rest) {
		return corruptf(name, "dump of user %d: %d identities in %d bytes, want %d", user, ids, len(rest), ids*idLen)
	}
	for i := range ids {
		id := rest[i*idLen : (i+1)*idLen]
		if i > 0 && bytes.Compare(rest[(i-1)*idLen:(i-1)*idLen+identityDigestLen], id[:identityDigestLen]) >= 0 {
			return corruptf(name, "dump of user %d: identities out of order", user)
		}
		if idLen == dumpIdentityLen {
			if _, _, err := decodeIdentityValue(id[identityDigestLen:]); err != nil {
				return corruptf(name, "dump of user %d: %v", user, err)
			}
		}
	}
	if ids > IdentityWindow && idLen == dumpIdentityLen {
		return corruptf(name, "dump of user %d: %d identities, more than the window of %d", user, ids, IdentityWindow)
	}
	*d = Dump{Member: a.m, Identities: ids, asm: a, raw: b, records: n, ids: len(b) - len(rest), idLen: idLen}
	return nil
}

// Import writes dumps into the store without reading it, with
// checkpoints, all or nothing. It is how the processor rebuilds a
// partition's users on an empty owner.
//
// Put writes each dump at once into sorted table files, one for the users
// key space (the checkpoints follow it) and one for the identities, and
// Commit ingests them (Pebble's Ingest, as CockroachDB applies a replica
// snapshot): no write-ahead log, no sort of a batch of millions of keys,
// nothing held in memory, and the files are in the store whole or not at
// all.
//
// Several goroutines can write one Import side by side, each into a part
// of its own (Part) holding a range of users that no other part's
// overlaps: Commit ingests every part's files at once.
//
// Like a Bulk it trusts the caller for what it cannot see without
// reading: the store holds no records of the users it is given, and no
// Batch is open on them. It checks that users come in ascending order
// within a part, each once, and that parts do not overlap. Each dump was
// checked by Dump.Decode. An Import and each of its parts belong to one
// goroutine at a time: Part and Commit are the Import's owner's, called
// while no part is being written.
type Import struct {
	s           *Store
	parts       []*ImportPart // parts[0] is Put's
	checkpoints [][2][]byte
	done        bool
}

// ImportPart is one writer of an Import: a users table file and an
// identities one, holding an ascending range of users.
type ImportPart struct {
	im    *Import
	w     [2]*sstable.Writer // users space, identities space
	paths [2]string
	n     int
	first uint64 // the first user put, when n > 0
	last  uint64
	err   error    // the first error of a Put, which Commit returns
	key   [64]byte // where Put builds keys: no allocation per record
}

// NewImport returns an empty Import.
func (s *Store) NewImport() *Import {
	im := &Import{s: s}
	im.parts = []*ImportPart{{im: im}}
	return im
}

// Part returns a new part of im, empty, for another goroutine to Put a
// range of users into.
func (im *Import) Part() *ImportPart {
	p := &ImportPart{im: im}
	im.parts = append(im.parts, p)
	return p
}

// Put writes the records of d into im's first part, as ImportPart.Put.
func (im *Import) Put(d Dump) error { return im.parts[0].Put(d) }

// Put writes the records of d, byte for byte as the dump holds them. Its
// user must be above the previous Put's of p.
func (p *ImportPart) Put(d Dump) error {
	if p.im.done {
		return ErrBatchDone
	}
	if p.err != nil {
		return p.err
	}
	if p.n > 0 && d.Member.UserID <= p.last {
		return errInvalidf("import: user %d after user %d", d.Member.UserID, p.last)
	}
	if p.w[0] == nil {
		if err := p.create(); err != nil {
			p.err = p.im.s.storageErr("import", err)
			return p.err
		}
	}
	err := d.each(spaceUsers, p.key[:], p.w[0].Set)
	if err == nil {
		err = d.each(spaceIdentities, p.key[:], p.w[1].Set)
	}
	if err != nil {
		p.err = p.im.s.storageErr(fmt.Sprintf("import user %d", d.Member.UserID), err)
		return p.err
	}
	if p.n == 0 {
		p.first = d.Member.UserID
	}
	p.last = d.Member.UserID
	p.n++
	return nil
}

// create makes the part's two table files.
func (p *ImportPart) create() error {
	s := p.im.s
	fs := s.opts.FS
	po := &pebble.Options{}
	po.EnsureDefaults()
	wo := po.MakeWriterOptions(0, s.db.TableFormat())
	for i := range p.w {
		path := fs.PathJoin(s.dir, fmt.Sprintf("import-%d-%d.sst", os.Getpid(), s.imports.Add(1)))
		f, err := fs.Create(path, vfs.WriteCategoryUnspecified)
		if err != nil {
			return err
		}
		p.paths[i] = path
		p.w[i] = sstable.NewWriter(objstorageprovider.NewFileWritable(f), wo)
	}
	return nil
}

// SetCheckpoint stages a checkpoint, as Batch.SetCheckpoint does.
func (im *Import) SetCheckpoint(topic string, partition int32, next int64) error {
	if im.done {
		return ErrBatchDone
	}
	if err := validCheckpoint(topic, partition); err != nil {
		return err
	}
	if next < 0 {
		return errInvalidf("checkpoint %s/%d: offset %d is negative", topic, partition, next)
	}
	v := encodeCheckpoint(next)
	im.checkpoints = append(im.checkpoints, [2][]byte{appendCheckpointKey(nil, topic, partition), v[:]})
	return nil
}

// Len returns the dumps written, by every part.
func (im *Import) Len() int {
	n := 0
	for _, p := range im.parts {
		n += p.n
	}
	return n
}

// Commit makes what was written part of the store, all or nothing, and
// durably. The Import is done afterwards, whatever the result. It fails
// with an error wrapping ErrInvalid, and writes nothing, if two parts'
// ranges of users overlap.
func (im *Import) Commit() (err error) {
	if im.done {
		return ErrBatchDone
	}
	defer im.Close()
	n := im.Len()
	for _, p := range im.parts {
		if p.err != nil {
			return p.err
		}
	}
	// The parts' files are ingested together, so no two may overlap:
	// in user order, each part starts above the previous one's end.
	// The checkpoints follow every user, in the last part's users file
	// (the first part's when none holds a user).
	parts := slices.DeleteFunc(slices.Clone(im.parts), func(p *ImportPart) bool { return p.n == 0 })
	slices.SortFunc(parts, func(a, b *ImportPart) int { return cmp.Compare(a.first, b.first) })
	for i := 1; i < len(parts); i++ {
		if parts[i].first <= parts[i-1].last {
			return errInvalidf("import: a part of users %d to %d overlaps one of users %d to %d",
				parts[i].first, parts[i].last, parts[i-1].first, parts[i-1].last)
		}
	}
	if len(parts) == 0 {
		parts = im.parts[:1]
	}
	op := fmt.Sprintf("commit import of %d users", n)
	if err := im.s.usable(op); err != nil {
		return err
	}
	err = func() (err error) {
		defer im.s.guardBare(&err)
		tail := parts[len(parts)-1]
		if tail.w[0] == nil {
			if err := tail.create(); err != nil {
				return err
			}
		}
		slices.SortFunc(im.checkpoints, func(a, b [2][]byte) int { return bytes.Compare(a[0], b[0]) })
		for _, c := range im.checkpoints {
			if err := tail.w[0].Set(c[0], c[1]); err != nil {
				return err
			}
		}
		var paths []string
		for _, p := range parts {
			for i, w := range p.w {
				if w == nil {
					continue
				}
				p.w[i] = nil
				if err := w.Close(); err != nil {
					return err
				}
				if md, err := w.Metadata(); err != nil {
					return err
				} else if md.Properties.NumEntries > 0 {
					paths = append(paths, p.paths[i])
				}
			}
		}
		if len(paths) == 0 {
			return nil
		}
		return im.s.db.Ingest(context.Background(), paths)
	}()
	if err != nil {
		return im.s.storageErr(op, err)
	}
	return nil
}

// Close discards what was not committed, and the table files. It is safe
// after Commit.
func (im *Import) Close() error {
	im.done = true
	for _, p := range im.parts {
		for i, w := range p.w {
			if w != nil {
				_ = w.Close()
				p.w[i] = nil
			}
		}
		for i, path := range p.paths {
			if path != "" {
				_ = im.s.opts.FS.Remove(path) // Ingest linked it; the link stays
				p.paths[i] = ""
			}
		}
	}
	return nil
}

// Export calls fn with the dump of every user with records, in ascending
// user order, from one consistent view of the store: what a test compares
// two stores with, user by user. The dump is only valid during the call.
func (s *Store) Export(fn func(userID uint64, dump []byte) error) (err error) {
	if err := s.usable("export"); err != nil {
		return err
	}
	defer s.guard("export", &err)
	snap := s.db.NewSnapshot()
	defer snap.Close()
	it, err := snap.NewIter(&pebble.IterOptions{LowerBound: []byte{spaceUsers}, UpperBound: []byte{spaceUsers + 1}})
	if err != nil {
		return s.storageErr("export", err)
	}
	var users []uint64
	for valid := it.First(); valid; valid = it.Next() {
		u := binary.BigEndian.Uint64(it.Key()[1:9])
		if len(users) == 0 || users[len(users)-1] != u {
			users = append(users, u)
		}
	}
	if err := it.Close(); err != nil {
		return s.storageErr("export", err)
	}
	// Users with identities but no record (a refused command only) have
	// no records to restore either; they do not occur, as a refusal
	// needs a Left user, but list them so that a comparison sees them.
	it, err = snap.NewIter(&pebble.IterOptions{LowerBound: []byte{spaceIdentities}, UpperBound: []byte{spaceIdentities + 1}})
	if err != nil {
		return s.storageErr("export", err)
	}
	seen := make(map[uint64]bool, len(users))
	for _, u := range users {
		seen[u] = true
	}
	for valid := it.First(); valid; valid = it.Next() {
		if u := binary.BigEndian.Uint64(it.Key()[1:9]); !seen[u] {
			seen[u] = true
			users = append(users, u)
		}
	}
	if err := it.Close(); err != nil {
		return s.storageErr("export", err)
	}
	slices.Sort(users)
	var buf []byte
	for _, u := range users {
		if buf, err = appendDump(snap, buf[:0], u); err != nil {
			return s.storageErr("export", err)
		}
		if err := fn(u, buf); err != nil {
			return err
		}
	}
	return nil
}
