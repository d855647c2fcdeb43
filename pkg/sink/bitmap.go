package sink

import "math/bits"

// Bitmap is a growable set of non-negative integers (input line numbers).
// The zero value is an empty set. It is not safe for concurrent use.
type Bitmap struct {
	words []uint64
	count int64
}

// Get reports whether i is in the set. Negative i is never in the set.
func (b *Bitmap) Get(i int64) bool {
	if b == nil || i < 0 {
		return false
	}
	w := i >> 6
	if w >= int64(len(b.words)) {
		return false
	}
	return b.words[w]&(1<<(uint64(i)&63)) != 0
}

// Set adds i to the set, growing it as needed, and reports whether i was
// newly added. Negative i is ignored.
func (b *Bitmap) Set(i int64) bool {
	if i < 0 {
		return false
	}
	w := i >> 6
	if w >= int64(len(b.words)) {
		n := max(2*len(b.words), int(w)+1, 64)
		grown := make([]uint64, n)
		copy(grown, b.words)
		b.words = grown
	}
	m := uint64(1) << (uint64(i) & 63)
	if b.words[w]&m != 0 {
		return false
	}
	b.words[w] |= m
	b.count++
	return true
}

// Count returns the number of elements in the set.
func (b *Bitmap) Count() int64 {
	if b == nil {
		return 0
	}
	return b.count
}

// Clone returns an independent copy.
func (b *Bitmap) Clone() *Bitmap {
	if b == nil {
		return &Bitmap{}
	}
	words := make([]uint64, len(b.words))
	copy(words, b.words)
	return &Bitmap{words: words, count: b.count}
}

// recount recomputes count from the words (used by tests of invariants).
func (b *Bitmap) recount() int64 {
	var n int64
	for _, w := range b.words {
		n += int64(bits.OnesCount64(w))
	}
	return n
}
