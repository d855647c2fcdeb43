package input

import (
	"hash/maphash"
	"math/bits"
)

// idSet is an open-addressing (linear probing) set of 64-bit hashes of
// custom_ids, used to find duplicates in bounded memory: 8 bytes per slot
// and at most 0.8 load, i.e. about 10.7 bytes per id when sized from the
// line count (107 MB for 10^7 ids), instead of a map[string] that would
// hold every id.
//
// Two different ids collide when their 64-bit hashes are equal; then the
// later one is reported as a duplicate (to errors.jsonl, never dropped
// silently). For n distinct ids the probability that this happens at all is
// about n²/2^65: 2.7e-6 for 10^7 ids, 2.7e-4 for 10^8. The hash seed is
// random per set, so no input can be built to collide on purpose.
type idSet struct {
	mem   *mem
	seed  maphash.Seed
	slots []uint64 // 0 = empty
	n     int
	// estimate, when set, predicts the final number of ids; it is asked
	// when the set must grow.
	estimate func() int64
}

const idSetMaxLoad = 0.8

func newIDSet(m *mem, expected int64) *idSet {
	s := &idSet{mem: m, seed: maphash.MakeSeed()}
	s.slots = alloc[uint64](m, slotsFor(expected))
	return s
}

// release returns the table's memory; the set must not be used afterwards.
func (s *idSet) release() {
	free(s.mem, s.slots)
	s.slots = nil
}

// slotsFor sizes a table for n ids at 0.75 load.
func slotsFor(n int64) int {
	return int(max(n, 0)*4/3) + 1024
}

// add inserts id and reports whether it was already present.
func (s *idSet) add(id []byte) bool {
	h := maphash.Bytes(s.seed, id)
	if h == 0 {
		h = 1
	}
	if float64(s.n+1) > idSetMaxLoad*float64(len(s.slots)) {
		s.grow()
	}
	if !s.insert(h) {
		return true
	}
	s.n++
	return false
}

// insert puts h in the table and reports whether it was new.
func (s *idSet) insert(h uint64) bool {
	size := uint64(len(s.slots))
	i, _ := bits.Mul64(h, size) // maps h uniformly onto [0, size)
	for {
		switch s.slots[i] {
		case 0:
			s.slots[i] = h
			return true
		case h:
			return false
		}
		i++
		if i == size {
			i = 0
		}
	}
}

func (s *idSet) grow() {
	want := int64(s.n) * 2
	if s.estimate != nil {
		// Ask for the predicted total (with 10% slack) rather than just
		// doubling: on a 10^7-line file that saves tens of MB.
		want = max(int64(s.n)*5/4, s.estimate()*11/10)
	}
	old := s.slots
	s.slots = alloc[uint64](s.mem, max(slotsFor(want), len(old)*5/4))
	for _, h := range old {
		if h != 0 {
			s.insert(h)
		}
	}
	free(s.mem, old)
}
