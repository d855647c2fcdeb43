package input

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
)

const (
	readBufSize = 256 << 10
	// DefaultMaxLineBytes bounds one input line; a longer line is a BadLine,
	// read past without being held in memory.
	DefaultMaxLineBytes = 64 << 20
	// scratchKeep is the largest line buffer kept between lines.
	scratchKeep = 8 << 20
)

// source reads the lines of a file, decompressing .gz and .zst (found by
// their magic bytes, whatever the file is called).
type source struct {
	f          *os.File
	raw        *countingReader
	br         *bufio.Reader
	closeDec   func() error
	compressed bool
	size       int64 // of the file on disk
	maxLine    int
	pos        int64 // bytes of the decompressed stream consumed
	scratch    []byte
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

func openSource(path string, maxLine int) (*source, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open input: %w", err)
	}
	s, err := newSource(f, maxLine)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("open input %s: %w", path, err)
	}
	return s, nil
}

// newSource reads f from its current offset. Closing the source closes f.
func newSource(f *os.File, maxLine int) (*source, error) {
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat: %w", err)
	}
	s := &source{f: f, size: st.Size(), maxLine: maxLine, raw: &countingReader{r: f}}
	br := bufio.NewReaderSize(s.raw, readBufSize)
	magic, err := br.Peek(4)
	if err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("read: %w", err)
	}
	switch {
	case bytes.HasPrefix(magic, []byte{0x1f, 0x8b}):
		gz, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("gzip: %w", err)
		}
		s.compressed, s.closeDec = true, gz.Close
		s.br = bufio.NewReaderSize(gz, readBufSize)
	case bytes.HasPrefix(magic, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		// Two decoder goroutines overlap decompression with parsing; Close
		// stops them.
		zd, err := zstd.NewReader(br, zstd.WithDecoderConcurrency(2), zstd.WithDecoderLowmem(true))
		if err != nil {
			return nil, fmt.Errorf("zstd: %w", err)
		}
		s.compressed = true
		s.closeDec = func() error { zd.Close(); return nil }
		s.br = bufio.NewReaderSize(zd, readBufSize)
	default:
		s.br = br
	}
	if bom, _ := s.br.Peek(3); bytes.Equal(bom, []byte{0xef, 0xbb, 0xbf}) {
		s.br.Discard(3)
		s.pos = 3
	}
	return s, nil
}

// readLine returns the next line without its newline, and the number of
// bytes it took in the stream. A line longer than maxLine is not kept:
// tooLong is set and line is nil. At the end it returns io.EOF. line is
// valid until the next call.
func (s *source) readLine() (line []byte, n int, tooLong bool, err error) {
	if cap(s.scratch) > scratchKeep {
		s.scratch = nil
	}
	s.scratch = s.scratch[:0]
	for {
		frag, err := s.br.ReadSlice('\n')
		n += len(frag)
		s.pos += int64(len(frag))
		if !tooLong {
			if len(s.scratch)+len(frag) > s.maxLine+1 { // +1: the newline
				tooLong, s.scratch = true, s.scratch[:0]
			} else if errors.Is(err, bufio.ErrBufferFull) || len(s.scratch) > 0 {
				s.scratch = append(s.scratch, frag...)
				line = s.scratch
			} else {
				line = frag
			}
		}
		switch {
		case err == nil:
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			if n == 0 {
				return nil, 0, false, io.EOF
			}
		default:
			return nil, n, false, fmt.Errorf("read: %w", err)
		}
		if tooLong {
			return nil, n, true, nil
		}
		if len(line) > 0 && line[len(line)-1] == '\n' {
			line = line[:len(line)-1]
		}
		return line, n, false, nil
	}
}

// progress estimates the fraction of the file read so far, from the
// compressed bytes consumed when the file is compressed.
func (s *source) progress() float64 {
	if s.size <= 0 {
		return 0
	}
	return min(1, float64(s.raw.n)/float64(s.size))
}

func (s *source) Close() error {
	var errs []error
	if s.closeDec != nil {
		errs = append(errs, s.closeDec())
	}
	errs = append(errs, s.f.Close())
	return errors.Join(errs...)
}
