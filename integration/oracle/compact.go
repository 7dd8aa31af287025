package oracle

import (
	"hash/crc32"
	"math"
)

// The compact table: how the oracle judges a load of ~100M signals in
// about 5 bytes each.
//
// A load's signals are numbered: their values start "sig-<seq>-" (the
// convention of the chaos load; the oracle parses it with its own code).
// A signal record that the rules leave to S5 alone (its key a user id, in
// its key's partition, not a re-published copy, marked at most gated, far
// below the outputs' size limit) and whose value is numbered is kept in a
// table indexed by its number: the CRC-32C of its key, value and
// timestamp, whether it was marked gated, and how many output records
// carry it. An output record with that number and CRC is that signal (the
// cohort keeps key, value and timestamp; the full judge identifies a
// signal by the same three). Its user and time are kept beside it, unless
// the Judge was sealed when it came and it lies in no final episode: it
// must then be forwarded exactly once, whoever and whenever it is. Any
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

// chunkBits sizes the table's chunks: 2^16 slots, 320 KiB each,
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
// number, user and timestamp (ms), and the CRC-32C of its key, value and
// timestamp.
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
	var b [9]byte
	b[0] = 0xff
	for i := range 8 {
		b[1+i] = byte(uint64(r.Timestamp) >> (56 - 8*i))
	}
	crc := crc32.Update(crc32.Checksum(r.Key, castagnoli), castagnoli, b[:1])
	crc = crc32.Update(crc, castagnoli, r.Value)
	crc = crc32.Update(crc, castagnoli, b[1:])
	return seqKey{seq: seq, user: uint32(user), ms: r.Timestamp, crc: crc}, true
}

// A slot's state: three flags and, above them, its output records up to
// maxSlotCount (more in seqTable.more).
const (
	slotPresent uint8 = 1 << iota // an input record of the signal was read
	slotGated                     // one of them was marked ExpectGated
	// slotOutside: the signal arrived after Seal and lies in no final
	// episode of its user: it must be forwarded exactly once, and the
	// table keeps neither its user nor its time (5 bytes a signal).
	slotOutside
	countShift   = 3
	maxSlotCount = math.MaxUint8 >> countShift
)

// seqChunk holds 2^chunkBits slots, column by column (5 bytes a slot).
type seqChunk struct {
	crc   [1 << chunkBits]uint32
	state [1 << chunkBits]uint8
}

// sideSlot is the user and time of a slot that is not slotOutside.
type sideSlot struct {
	ms   int64
	user uint32
}

// seqTable is one route's numbered signals.
type seqTable struct {
	chunks  []*seqChunk
	present int
	side    map[uint64]sideSlot // user and time of the slots not outside every episode
	more    map[uint64]int      // output records beyond maxSlotCount, by number
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

// holds reports whether slot i of c (number seq) is the signal k.
func (t *seqTable) holds(c *seqChunk, i int, k seqKey) bool {
	if c.crc[i] != k.crc {
		return false
	}
	if c.state[i]&slotOutside != 0 {
		return true // key, value and timestamp agree by their CRC
	}
	s := t.side[k.seq]
	return s.ms == k.ms && s.user == k.user
}

// match reports whether k's slot holds a signal and it is k's.
func (t *seqTable) match(k seqKey) (*seqChunk, int, bool) {
	c, i := t.slot(k.seq, false)
	if c == nil || c.state[i]&slotPresent == 0 {
		return nil, 0, false
	}
	return c, i, t.holds(c, i, k)
}

// addInput takes an input record of the signal k that reached rule S5;
// outside says it lies in no final episode (known once the Judge is
// sealed). It returns false when k's number belongs to another signal
// (the record is then for the full judge).
func (t *seqTable) addInput(k seqKey, gated, outside bool) bool {
	c, i := t.slot(k.seq, true)
	switch {
	case c.state[i]&slotPresent == 0:
		c.crc[i], c.state[i] = k.crc, slotPresent
		if outside {
			c.state[i] |= slotOutside
		} else {
			if t.side == nil {
				t.side = make(map[uint64]sideSlot)
			}
			t.side[k.seq] = sideSlot{ms: k.ms, user: k.user}
		}
		t.present++
	case !t.holds(c, i, k):
		return false
	}
	if gated {
		c.state[i] |= slotGated
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
	if c.state[i]>>countShift == maxSlotCount {
		if t.more == nil {
			t.more = make(map[uint64]int)
		}
		t.more[k.seq]++
		return true
	}
	c.state[i] += 1 << countShift
	return true
}

// outputs is the output records counted for the slot.
func (t *seqTable) outputs(c *seqChunk, i int, seq uint64) int {
	return int(c.state[i]>>countShift) + t.more[seq]
}

// each calls fn for every signal of the table in number order.
func (t *seqTable) each(fn func(seq uint64, c *seqChunk, i int)) {
	for ci, c := range t.chunks {
		if c == nil {
			continue
		}
		for i := range c.state {
			if c.state[i]&slotPresent != 0 {
				fn(uint64(ci)<<chunkBits|uint64(i), c, i)
			}
		}
	}
}
