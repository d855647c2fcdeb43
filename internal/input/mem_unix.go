//go:build unix

package input

import "syscall"

// mapBytes maps n zeroed bytes, or returns nil (then the caller uses the Go heap).
func (m *mem) mapBytes(n int) []byte {
	b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil
	}
	return b
}

func unmapBytes(b []byte) { _ = syscall.Munmap(b) }
