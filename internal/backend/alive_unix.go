//go:build unix

package backend

import (
	"errors"
	"net"
	"syscall"
)

// alive reports whether an idle connection can carry a request: the server
// has not closed it (no EOF waiting) and sent nothing unasked. One
// non-blocking peek, no goroutine.
func alive(nc net.Conn) bool {
	sc, ok := nc.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	live := false
	err = rc.Read(func(fd uintptr) bool {
		var b [1]byte
		_, _, perr := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		live = errors.Is(perr, syscall.EAGAIN) || errors.Is(perr, syscall.EWOULDBLOCK)
		return true // never wait for readiness
	})
	return err == nil && live
}
