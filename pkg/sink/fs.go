package sink

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
)

// ErrOutputUnwritable is wrapped by every error caused by the output
// directory refusing a write, a sync, a create or a rename (disk full,
// read-only file system, permissions, I/O error). Records accepted before
// such an error are kept in memory and written by a later Retry, Sync or
// write once the output is writable again.
var ErrOutputUnwritable = errors.New("output unwritable")

// ErrClosed is returned by writes after a successful Close.
var ErrClosed = errors.New("sink closed")

// ErrDuplicate is returned when a line already recorded (in a shard or in
// errors.jsonl) is written again; the second record is not written.
var ErrDuplicate = errors.New("line already recorded")

// outFile is the part of *os.File the writer uses.
type outFile interface {
	io.Writer
	Sync() error
	Close() error
}

// fileSystem is the seam through which the writer touches the disk, so that
// tests can inject faults (as root, chmod does not make a directory
// unwritable). osFS is the only production implementation.
type fileSystem interface {
	// Create creates a new file for appending, failing if it exists.
	Create(name string) (outFile, error)
	// OpenAppend opens an existing file (or creates it) for appending.
	OpenAppend(name string) (outFile, error)
	WriteFileAtomic(path string, data []byte) error
	Rename(oldpath, newpath string) error
	SyncDir(dir string) error
}

type osFS struct{}

func (osFS) Create(name string) (outFile, error) {
	return os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL|os.O_APPEND, 0o644)
}

func (osFS) OpenAppend(name string) (outFile, error) {
	return os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
}

func (osFS) WriteFileAtomic(path string, data []byte) error { return WriteFileAtomic(path, data) }
func (osFS) Rename(oldpath, newpath string) error           { return os.Rename(oldpath, newpath) }
func (osFS) SyncDir(dir string) error                       { return syncDir(dir) }

// tmpMarker is part of the name of every temporary file WriteFileAtomic
// creates; recovery removes leftovers carrying it.
const tmpMarker = ".tmp-"

// WriteFileAtomic replaces path with data so that a crash at any point
// leaves either the old or the new content: it writes a temporary file in
// the same directory, fsyncs it, renames it over path and fsyncs the
// directory.
func WriteFileAtomic(path string, data []byte) error {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, base+tmpMarker+"*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	tmp := f.Name()
	ok := false
	defer func() {
		if !ok {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	if _, err := f.Write(data); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Chmod(0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("fsync %s: %w", tmp, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("close %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("rename %s: %w", path, err)
	}
	ok = true
	if err := syncDir(dir); err != nil {
		return err
	}
	return nil
}

// syncDir fsyncs a directory so that renames and creations in it are durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("open dir %s: %w", dir, err)
	}
	err = d.Sync()
	cerr := d.Close()
	if err != nil {
		return fmt.Errorf("fsync dir %s: %w", dir, err)
	}
	if cerr != nil {
		return fmt.Errorf("close dir %s: %w", dir, cerr)
	}
	return nil
}

// unwritable wraps an I/O error on the output with ErrOutputUnwritable.
func unwritable(op string, err error) error {
	return fmt.Errorf("%w: %s: %w", ErrOutputUnwritable, op, err)
}
