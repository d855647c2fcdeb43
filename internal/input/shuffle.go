package input

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"sort"
)

// shuffled serves a shard's lines in a seeded random order. Open indexes
// the file once (index); memory is 8 bytes (offset) + 4 bytes (permutation)
// + 1 bit (duplicate flag) per line of the shard, plus the duplicate set
// while indexing. Lines are then read back with ReadAt.
type shuffled struct {
	f       *os.File
	offsets offsets  // of the shard's lines, in file order
	dups    []uint64 // bit k: shard line k repeats an earlier id
	empties []emptyRun
	perm    []uint32
	next    int
	buf     []byte
	guess   int // bytes to read first for one line
	maxLine int
}

// emptyRun records that before the non-empty line with this ordinal there
// are empties empty lines in total; it maps ordinals to line numbers.
type emptyRun struct {
	ordinal int64
	empties int64
}

const offsetChunk = 1 << 16

// offsets is a chunked []int64, so that growing it never copies (and never
// holds two copies of) a large array.
type offsets struct {
	mem    *mem
	chunks [][]int64
	n      int
}

func (o *offsets) add(v int64) {
	if o.n%offsetChunk == 0 {
		o.chunks = append(o.chunks, alloc[int64](o.mem, offsetChunk))
	}
	o.chunks[o.n/offsetChunk][o.n%offsetChunk] = v
	o.n++
}

func (o *offsets) at(k int) int64 { return o.chunks[k/offsetChunk][k%offsetChunk] }

// index runs the shuffle pre-pass over src (and closes it): decompress into
// TempDir when compressed, record the offsets of the shard's lines, find
// duplicates in file order, and draw the permutation.
func (r *Reader) index(src *source) (_ *shuffled, err error) {
	sh := &shuffled{maxLine: r.opts.maxLine(), offsets: offsets{mem: r.mem}}
	defer func() {
		if err != nil {
			sh.Close()
		}
	}()
	if src.compressed {
		tmp, err := spill(src, r.opts.TempDir)
		src.Close()
		if err != nil {
			return nil, err
		}
		sh.f = tmp
		if src, err = newSource(tmp, r.opts.maxLine()); err != nil {
			return nil, fmt.Errorf("read decompressed copy: %w", err)
		}
		r.cur = src
	} else {
		sh.f = src.f
	}
	// src.f is sh.f now: only src's decoder (none) would need closing.

	var totalEmpties, bytesSeen int64
	for {
		if r.line%ctxCheckEvery == 0 {
			if err := r.ctx.Err(); err != nil {
				return nil, fmt.Errorf("index: %w", err)
			}
		}
		off := src.pos
		raw, n, tooLong, err := src.readLine()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("index line %d: %w", r.line+1, err)
		}
		r.line++
		if !tooLong {
			raw = trimSpace(raw)
			if len(raw) == 0 {
				totalEmpties++
				continue
			}
		}
		ord := r.ordinal
		r.ordinal++
		if totalEmpties > 0 && (len(sh.empties) == 0 || sh.empties[len(sh.empties)-1].empties != totalEmpties) {
			sh.empties = append(sh.empties, emptyRun{ordinal: ord, empties: totalEmpties})
		}
		id, _ := r.classify(raw, tooLong)
		dup := id != nil && r.ids.add(id)
		if !r.mine(ord) {
			continue
		}
		k := sh.offsets.n
		sh.offsets.add(off)
		bytesSeen += int64(n)
		if k%64 == 0 {
			sh.dups = append(sh.dups, 0)
		}
		if dup {
			sh.dups[k/64] |= 1 << (k % 64)
		}
	}
	n := sh.offsets.n
	if n > math.MaxUint32 {
		return nil, fmt.Errorf("index: %d lines in one shard, a shuffle takes at most %d", n, uint32(math.MaxUint32))
	}
	if n > 0 {
		sh.guess = int(min(max(2*bytesSeen/int64(n)+64, 512), 1<<20))
	}
	r.ids.release() // free the duplicate set before allocating the permutation
	r.ids = nil
	sh.perm = alloc[uint32](r.mem, n)
	for k := range sh.perm {
		sh.perm[k] = uint32(k)
	}
	// Fisher–Yates with a seeded PCG: every permutation is equally likely,
	// so any prefix is a uniform sample without replacement.
	rng := rand.New(rand.NewPCG(uint64(r.opts.Seed), 0x6a09e667f3bcc909))
	for k := n - 1; k > 0; k-- {
		j := rng.Uint64N(uint64(k + 1))
		sh.perm[k], sh.perm[j] = sh.perm[j], sh.perm[k]
	}
	return sh, nil
}

// spill decompresses src into an unlinked temporary file under dir: the
// copy disappears when the file is closed, even after a crash.
func spill(src *source, dir string) (*os.File, error) {
	tmp, err := os.CreateTemp(dir, "gend-input-*.jsonl")
	if err != nil {
		return nil, fmt.Errorf("create decompressed copy: %w", err)
	}
	if err := os.Remove(tmp.Name()); err != nil {
		tmp.Close()
		return nil, fmt.Errorf("unlink decompressed copy: %w", err)
	}
	w := bufio.NewWriterSize(tmp, readBufSize)
	if _, err := io.Copy(w, src.br); err != nil {
		tmp.Close()
		return nil, fmt.Errorf("decompress into %s: %w", dir, err)
	}
	if err := w.Flush(); err != nil {
		tmp.Close()
		return nil, fmt.Errorf("write decompressed copy: %w", err)
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		tmp.Close()
		return nil, fmt.Errorf("rewind decompressed copy: %w", err)
	}
	return tmp, nil
}

// lineOf maps an ordinal (index among non-empty lines) to its line number.
func (sh *shuffled) lineOf(ord int64) int64 {
	k := sort.Search(len(sh.empties), func(i int) bool { return sh.empties[i].ordinal > ord })
	if k == 0 {
		return ord + 1
	}
	return ord + 1 + sh.empties[k-1].empties
}

func (r *Reader) nextShuffled() (Item, *BadLine, error) {
	sh := r.sh
	for sh.next < len(sh.perm) {
		if sh.next%ctxCheckEvery == 0 {
			if err := r.ctx.Err(); err != nil {
				return Item{}, nil, fmt.Errorf("read input %s: %w", r.path, err)
			}
		}
		k := int(sh.perm[sh.next])
		sh.next++
		lineNo := sh.lineOf(int64(k)*r.shardN + r.shardI)
		if r.opts.Skip != nil && r.opts.Skip(lineNo) {
			continue
		}
		raw, tooLong, err := sh.readAt(sh.offsets.at(k))
		if err != nil {
			return Item{}, nil, fmt.Errorf("read input %s line %d: %w", r.path, lineNo, err)
		}
		if !tooLong {
			raw = trimSpace(raw)
		}
		id, msg := r.classify(raw, tooLong)
		dup := sh.dups[k/64]&(1<<(k%64)) != 0
		it, bad := r.emit(lineNo, id, msg, dup)
		return it, bad, nil
	}
	return Item{}, nil, io.EOF
}

// readAt reads the line that starts at off.
func (sh *shuffled) readAt(off int64) ([]byte, bool, error) {
	if cap(sh.buf) > scratchKeep {
		sh.buf = nil
	}
	want := sh.guess
	for {
		if cap(sh.buf) < want {
			sh.buf = make([]byte, want)
		}
		buf := sh.buf[:want]
		n, err := sh.f.ReadAt(buf, off)
		if i := bytes.IndexByte(buf[:n], '\n'); i >= 0 {
			if i > sh.maxLine {
				return nil, true, nil
			}
			return buf[:i], false, nil
		}
		if errors.Is(err, io.EOF) {
			if n > sh.maxLine {
				return nil, true, nil
			}
			return buf[:n], false, nil
		}
		if err != nil {
			return nil, false, fmt.Errorf("read at %d: %w", off, err)
		}
		if want > sh.maxLine {
			return nil, true, nil
		}
		want = min(want*4, sh.maxLine+1)
	}
}

func (sh *shuffled) Close() error {
	if sh.f == nil {
		return nil
	}
	err := sh.f.Close()
	sh.f = nil
	return err
}
