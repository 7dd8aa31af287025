package oracle

import (
	"hash/crc32"
	"math"
)

// The compact table: how the oracle judges a load of ~100M signals in
// ~20 bytes each.
//
// A load's signals are numbered: their values start "sig-<seq>-" (the
// convention of the chaos load; the oracle parses it with its own code).
// A signal record that the rules leave to S5 alone (its key a user id, in
// its key's partition, not a re-published copy, marked at most gated, far
// below the outputs' size limit) and whose value is numbered is kept in a
// table indexed by its number: its user, its timestamp, a CRC of its key
// and value, whether it was marked gated, and how many output records
// carry it. An output record with that number and the same user,
// timestamp and CRC is that signal (the cohort keeps key, value and
// timestamp; the full judge identifies a signal by the same three). Any
// other record (a hostile one, one whose number is taken by a different
// signal, an output record met before its input) goes to the full judge
// as before, which keeps a digest of each (about 600 bytes); Report joins
// the two where a signal has records in both.
//
// Inputs are best read before outputs: an output record met first is
// kept in full until Report.

// seqPrefix starts a numbered signal value.
const seqPrefix = "sig-"

// maxSeq bounds the numbers the table takes; a value numbered beyond it
// is judged in full. It bounds the table's directory to 2^18 chunks.
const maxSeq = 1 << 34

// chunkBits sizes the table's chunks: 2^16 slots, about 1.2 MB each,
// allocated when a number in their range first arrives.
const chunkBits = 16

// parseSeq returns the number of a value "sig-<seq>-...", seq without
// leading zeros and below maxSeq.
func parseSeq(value []byte) (uint64, bool) {
	if len(value) < len(seqPrefix)+2 || string(value[:len(seqPrefix)]) != seqPrefix {
		return 0, false
	}
	rest := value[len(seqPrefix):]
	var seq uint64
	i := 0
	for ; i < len(rest) && rest[i] >= '0' && rest[i] <= '9'; i++ {
		seq = seq*10 + uint64(rest[i]-'0')
		if seq >= maxSeq {
			return 0, false
		}
	}
	if i == 0 || i == len(rest) || rest[i] != '-' || (rest[0] == '0' && i > 1) {
		return 0, false
	}
	return seq, true
}

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// seqKey is what the table keeps to recognise a numbered signal: its
// number, user, timestamp (ms) and the CRC of its key and value.
type seqKey struct {
	seq  uint64
	user uint32
	ms   int64
	crc  uint32
}

// seqKeyOf returns r's seqKey, if its value is numbered and its key a
// user id of 32 bits.
func seqKeyOf(r Record) (seqKey, bool) {
	seq, ok := parseSeq(r.Value)
	if !ok {
		return seqKey{}, false
	}
	user, ok := parseUserID(r.Key)
	if !ok || user > math.MaxUint32 {
		return seqKey{}, false
	}
	crc := crc32.Update(crc32.Checksum(r.Key, castagnoli), castagnoli, []byte{0xff})
	crc = crc32.Update(crc, castagnoli, r.Value)
	return seqKey{seq: seq, user: uint32(user), ms: r.Timestamp, crc: crc}, true
}

// Slot flags.
const (
	slotPresent uint8 = 1 << iota // an input record of the signal was read
	slotGated                     // one of them was marked ExpectGated
)

// seqChunk holds 2^chunkBits slots, column by column (18 bytes a slot).
type seqChunk struct {
	ms    [1 << chunkBits]int64
	user  [1 << chunkBits]uint32
	crc   [1 << chunkBits]uint32
	flags [1 << chunkBits]uint8
	count [1 << chunkBits]uint8 // output records, up to 255; more in seqTable.more
}

// seqTable is one route's numbered signals.
type seqTable struct {
	chunks  []*seqChunk
	present int
	more    map[uint64]int // output records beyond 255, by number
}

// slot returns the chunk and index of seq, allocating the chunk when
// alloc is set; nil when it is absent.
func (t *seqTable) slot(seq uint64, alloc bool) (*seqChunk, int) {
	c := int(seq >> chunkBits)
	if c >= len(t.chunks) {
		if !alloc {
			return nil, 0
		}
		t.chunks = append(t.chunks, make([]*seqChunk, c+1-len(t.chunks))...)
	}
	if t.chunks[c] == nil {
		if !alloc {
			return nil, 0
		}
		t.chunks[c] = new(seqChunk)
	}
	return t.chunks[c], int(seq & (1<<chunkBits - 1))
}

// match reports whether k's slot holds a signal and it is k's.
func (t *seqTable) match(k seqKey) (*seqChunk, int, bool) {
	c, i := t.slot(k.seq, false)
	if c == nil || c.flags[i]&slotPresent == 0 {
		return nil, 0, false
	}
	return c, i, c.ms[i] == k.ms && c.user[i] == k.user && c.crc[i] == k.crc
}

// addInput takes an input record of the signal k that reached rule S5;
// false when k's number belongs to another signal (the record is then
// for the full judge).
func (t *seqTable) addInput(k seqKey, gated bool) bool {
	c, i := t.slot(k.seq, true)
	switch {
	case c.flags[i]&slotPresent == 0:
		c.ms[i], c.user[i], c.crc[i], c.flags[i] = k.ms, k.user, k.crc, slotPresent
		t.present++
	case c.ms[i] != k.ms || c.user[i] != k.user || c.crc[i] != k.crc:
		return false
	}
	if gated {
		c.flags[i] |= slotGated
	}
	return true
}

// addOutput counts an output record of the signal k; false when the
// table holds no such signal.
func (t *seqTable) addOutput(k seqKey) bool {
	c, i, ok := t.match(k)
	if !ok {
		return false
	}
	if c.count[i] == math.MaxUint8 {
		if t.more == nil {
			t.more = make(map[uint64]int)
		}
		t.more[k.seq]++
		return true
	}
	c.count[i]++
	return true
}

// outputs is the output records counted for the slot.
func (t *seqTable) outputs(c *seqChunk, i int, seq uint64) int {
	return int(c.count[i]) + t.more[seq]
}

// each calls fn for every signal of the table in number order.
func (t *seqTable) each(fn func(seq uint64, c *seqChunk, i int)) {
	for ci, c := range t.chunks {
		if c == nil {
			continue
		}
		for i := range c.flags {
			if c.flags[i]&slotPresent != 0 {
				fn(uint64(ci)<<chunkBits|uint64(i), c, i)
			}
		}
	}
}
