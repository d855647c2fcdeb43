package input

import "unsafe"

// mem hands out the large arrays of a Reader (the duplicate set, a
// shuffle's offsets and permutation) from memory mapped outside the Go heap
// where the OS allows (mem_unix.go). They hold no pointers, and keeping
// them out of the heap keeps the garbage collector's heap goal (twice the
// live heap by default) from doubling them: on a 10^7-line file that is
// the difference between ~110 MB and ~220 MB of RSS. Reader.Close unmaps
// them; a cleanup does it for a Reader that is dropped without Close.
type mem struct {
	maps map[*byte][]byte
}

func newMem() *mem { return &mem{maps: map[*byte][]byte{}} }

// alloc returns a zeroed slice of n elements.
func alloc[T uint32 | uint64 | int64](m *mem, n int) []T {
	if n == 0 {
		return nil
	}
	var zero T
	b := m.mapBytes(n * int(unsafe.Sizeof(zero)))
	if b == nil {
		return make([]T, n)
	}
	m.maps[&b[0]] = b
	return unsafe.Slice((*T)(unsafe.Pointer(&b[0])), n)
}

// free releases a slice from alloc (a no-op for one from the Go heap).
func free[T uint32 | uint64 | int64](m *mem, s []T) {
	if len(s) == 0 {
		return
	}
	p := (*byte)(unsafe.Pointer(&s[0]))
	if b, ok := m.maps[p]; ok {
		delete(m.maps, p)
		unmapBytes(b)
	}
}

// releaseAll unmaps everything; the slices must not be used afterwards.
func (m *mem) releaseAll() {
	for p, b := range m.maps {
		delete(m.maps, p)
		unmapBytes(b)
	}
}
