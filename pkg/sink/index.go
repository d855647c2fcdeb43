package sink

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
)

// A shard index (.gend/part-NNNNN.lines) lets recovery learn which input
// lines a closed shard holds without parsing the shard. Layout:
//
//	"GENDIDX1"
//	uvarint  count
//	count ×  varint delta of the line number from the previous one (from 0)
//	8 bytes  shard size in bytes            (little endian)
//	8 bytes  prompt tokens
//	8 bytes  completion tokens
//	32 bytes sha256 of the shard
//	4 bytes  CRC-32C of everything above
//
// It is written and fsynced before the shard is renamed to its final name,
// so every closed shard normally has one; a missing or mismatching index is
// rebuilt by scanning the shard.
const indexMagic = "GENDIDX1"

var crcTable = crc32.MakeTable(crc32.Castagnoli)

type shardIndex struct {
	lines            []int64
	bytes            int64
	promptTokens     int64
	completionTokens int64
	sha256           [32]byte
}

func encodeIndex(ix *shardIndex) []byte {
	buf := make([]byte, 0, len(indexMagic)+binary.MaxVarintLen64+3*len(ix.lines)+60)
	buf = append(buf, indexMagic...)
	buf = binary.AppendUvarint(buf, uint64(len(ix.lines)))
	var prev int64
	for _, l := range ix.lines {
		buf = binary.AppendVarint(buf, l-prev)
		prev = l
	}
	buf = binary.LittleEndian.AppendUint64(buf, uint64(ix.bytes))
	buf = binary.LittleEndian.AppendUint64(buf, uint64(ix.promptTokens))
	buf = binary.LittleEndian.AppendUint64(buf, uint64(ix.completionTokens))
	buf = append(buf, ix.sha256[:]...)
	return binary.LittleEndian.AppendUint32(buf, crc32.Checksum(buf, crcTable))
}

var errBadIndex = errors.New("bad shard index")

func decodeIndex(data []byte) (*shardIndex, error) {
	const trailer = 8 + 8 + 8 + 32 + 4
	if len(data) < len(indexMagic)+1+trailer || string(data[:len(indexMagic)]) != indexMagic {
		return nil, fmt.Errorf("%w: too short or wrong magic", errBadIndex)
	}
	body, sum := data[:len(data)-4], binary.LittleEndian.Uint32(data[len(data)-4:])
	if crc32.Checksum(body, crcTable) != sum {
		return nil, fmt.Errorf("%w: checksum mismatch", errBadIndex)
	}
	p := body[len(indexMagic) : len(body)-(trailer-4)]
	n, k := binary.Uvarint(p)
	if k <= 0 || n > uint64(len(p)) {
		return nil, fmt.Errorf("%w: bad count", errBadIndex)
	}
	p = p[k:]
	ix := &shardIndex{lines: make([]int64, 0, n)}
	var prev int64
	for range n {
		d, k := binary.Varint(p)
		if k <= 0 {
			return nil, fmt.Errorf("%w: bad line entry", errBadIndex)
		}
		p = p[k:]
		prev += d
		if prev <= 0 {
			return nil, fmt.Errorf("%w: line %d out of range", errBadIndex, prev)
		}
		ix.lines = append(ix.lines, prev)
	}
	if len(p) != 0 {
		return nil, fmt.Errorf("%w: %d trailing bytes", errBadIndex, len(p))
	}
	t := body[len(body)-(trailer-4):]
	ix.bytes = int64(binary.LittleEndian.Uint64(t[0:]))
	ix.promptTokens = int64(binary.LittleEndian.Uint64(t[8:]))
	ix.completionTokens = int64(binary.LittleEndian.Uint64(t[16:]))
	copy(ix.sha256[:], t[24:56])
	return ix, nil
}
