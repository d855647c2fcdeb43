package sink

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

var (
	finalRe = regexp.MustCompile(`^part-(\d{5,})\.jsonl$`)
	openRe  = regexp.MustCompile(`^part-(\d{5,})\.jsonl\.open$`)
	indexRe = regexp.MustCompile(`^part-(\d{5,})\.lines$`)
)

// recover rebuilds the sink's state from output.dir; see docs/durability.md
// for the crash points it handles. It runs before any goroutine starts.
func (l *Local) recover() (Recovered, error) {
	var notes []string
	note := func(format string, a ...any) { notes = append(notes, fmt.Sprintf(format, a...)) }

	// 1. The manifest.
	mf := Manifest{JobID: l.opts.JobID}
	mfPath := filepath.Join(l.dir, manifestName)
	if data, err := os.ReadFile(mfPath); err == nil {
		var m Manifest
		if err := json.Unmarshal(data, &m); err != nil {
			note("manifest.json unreadable (%v): rebuilt from the shards", err)
		} else {
			if m.JobID != "" && m.JobID != l.opts.JobID {
				return Recovered{}, fmt.Errorf("output dir belongs to job %q, not %q", m.JobID, l.opts.JobID)
			}
			mf.Shards = m.Shards
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return Recovered{}, fmt.Errorf("read manifest: %w", err)
	}

	// 2. Leftover temporary files of interrupted atomic writes.
	for _, d := range []string{l.dir, l.shardDir, l.metaDir} {
		ents, err := os.ReadDir(d)
		if err != nil {
			return Recovered{}, fmt.Errorf("list %s: %w", d, err)
		}
		for _, e := range ents {
			if !e.Type().IsRegular() || !strings.Contains(e.Name(), tmpMarker) {
				continue
			}
			p := filepath.Join(d, e.Name())
			if err := os.Remove(p); err != nil {
				return Recovered{}, unwritable("remove "+p, err)
			}
			note("removed leftover temporary file %s", p)
		}
	}

	// 3. What is in shards/.
	finals := map[int]bool{}
	var opens []int
	maxNum := -1
	ents, err := os.ReadDir(l.shardDir)
	if err != nil {
		return Recovered{}, fmt.Errorf("list shards: %w", err)
	}
	for _, e := range ents {
		if m := finalRe.FindStringSubmatch(e.Name()); m != nil {
			n, _ := strconv.Atoi(m[1])
			finals[n] = true
			maxNum = max(maxNum, n)
		} else if m := openRe.FindStringSubmatch(e.Name()); m != nil {
			n, _ := strconv.Atoi(m[1])
			opens = append(opens, n)
			maxNum = max(maxNum, n)
		}
	}
	slices.Sort(opens)

	// 4. Closed shards listed in the manifest, in order: the index is
	// trusted when it matches the file size and the manifest entry, else
	// the shard is scanned (and repaired if it is damaged).
	var kept []ShardInfo
	seen := map[int]bool{}
	for _, e := range mf.Shards {
		num, ok := parseShardEntry(e.Name)
		if !ok || seen[num] {
			note("manifest entry %q dropped (bad or repeated name)", e.Name)
			continue
		}
		maxNum = max(maxNum, num)
		if !finals[num] {
			if e.S3Key != "" {
				if ix, err := l.readIndex(num); err == nil && l.useIndex(ix, e.Bytes, &e) {
					seen[num] = true
					kept = append(kept, e)
					note("%s missing locally; kept (uploaded as %s)", e.Name, e.S3Key)
					continue
				}
			}
			note("%s listed in the manifest but missing: dropped, its lines will be redone", e.Name)
			continue
		}
		info, err := l.loadClosed(num, &e, note)
		if err != nil {
			return Recovered{}, err
		}
		seen[num] = true
		kept = append(kept, info)
	}

	// 5. Closed shards missing from the manifest: a crash between the
	// rename and the manifest write.
	var orphans []int
	for n := range finals {
		if !seen[n] {
			orphans = append(orphans, n)
		}
	}
	slices.Sort(orphans)
	for _, n := range orphans {
		info, err := l.loadClosed(n, nil, note)
		if err != nil {
			return Recovered{}, err
		}
		note("%s was closed but not in the manifest: added", info.Name)
		seen[n] = true
		kept = append(kept, info)
	}

	// 6. errors.jsonl: torn tail truncated, duplicates dropped.
	errPath := filepath.Join(l.dir, errorsName)
	if _, err := os.Stat(errPath); err == nil {
		res, err := scanFile(errPath, parseErrorLine, &l.done)
		if err != nil {
			return Recovered{}, err
		}
		if err := repairScanned(errPath, res, note); err != nil {
			return Recovered{}, err
		}
		l.failed = int64(len(res.lines))
	}

	// 7. Open shards (.open): scanned, repaired, and closed as they are.
	for _, n := range opens {
		info, ok, err := l.closeRecoveredOpen(n, finals, &maxNum, note)
		if err != nil {
			return Recovered{}, err
		}
		if ok {
			num, _ := parseShardEntry(info.Name)
			seen[num] = true
			kept = append(kept, info)
		}
	}

	// 8. Indexes of shards that never got their final name.
	if ents, err := os.ReadDir(l.metaDir); err == nil {
		for _, e := range ents {
			m := indexRe.FindStringSubmatch(e.Name())
			if m == nil {
				continue
			}
			n, _ := strconv.Atoi(m[1])
			if seen[n] {
				continue
			}
			if err := os.Remove(filepath.Join(l.metaDir, e.Name())); err != nil {
				return Recovered{}, unwritable("remove stale index", err)
			}
			note("removed stale index %s", e.Name())
		}
	}

	slices.SortFunc(kept, func(a, b ShardInfo) int { return strings.Compare(a.Name, b.Name) })
	mf.Shards = kept
	l.manifest = mf
	l.nextNum = maxNum + 1
	for _, s := range kept {
		l.completed += s.Records
		l.prompt += s.PromptTokens
		l.compl += s.CompletionTokens
	}
	data, seq := l.bumpManifestLocked()
	if err := l.writeManifest(data, seq); err != nil {
		return Recovered{}, err
	}
	return Recovered{
		Done:             l.done.Clone(),
		Completed:        l.completed,
		Failed:           l.failed,
		PromptTokens:     l.prompt,
		CompletionTokens: l.compl,
		Repaired:         notes,
	}, nil
}

func parseShardEntry(name string) (int, bool) {
	dir, base := filepath.Split(filepath.FromSlash(name))
	if filepath.Clean(dir) != shardsDirName {
		return 0, false
	}
	m := finalRe.FindStringSubmatch(base)
	if m == nil {
		return 0, false
	}
	n, err := strconv.Atoi(m[1])
	return n, err == nil
}

func (l *Local) readIndex(num int) (*shardIndex, error) {
	data, err := os.ReadFile(l.indexPath(num))
	if err != nil {
		return nil, err
	}
	return decodeIndex(data)
}

// useIndex marks the index's lines done when it matches size and entry and
// none of its lines is already done; it reports whether it did.
func (l *Local) useIndex(ix *shardIndex, size int64, e *ShardInfo) bool {
	if ix.bytes != size {
		return false
	}
	if e != nil && (e.Bytes != ix.bytes || e.Records != int64(len(ix.lines)) ||
		e.SHA256 != hex.EncodeToString(ix.sha256[:])) {
		return false
	}
	for _, n := range ix.lines {
		if l.done.Get(n) {
			return false
		}
	}
	for _, n := range ix.lines {
		l.done.Set(n)
	}
	return true
}

// loadClosed learns the lines of a closed shard from its index, or by
// scanning (and repairing) it, and returns its manifest entry.
func (l *Local) loadClosed(num int, want *ShardInfo, note func(string, ...any)) (ShardInfo, error) {
	path := filepath.Join(l.shardDir, shardName(num))
	name := filepath.ToSlash(filepath.Join(shardsDirName, shardName(num)))
	st, err := os.Stat(path)
	if err != nil {
		return ShardInfo{}, fmt.Errorf("stat %s: %w", path, err)
	}
	if ix, err := l.readIndex(num); err == nil && l.useIndex(ix, st.Size(), want) {
		info := ShardInfo{
			Name: name, Records: int64(len(ix.lines)), Bytes: ix.bytes,
			SHA256: hex.EncodeToString(ix.sha256[:]), PromptTokens: ix.promptTokens, CompletionTokens: ix.completionTokens,
		}
		if want != nil {
			info.S3Key = want.S3Key
		}
		return info, nil
	}
	res, err := scanFile(path, l.parseShardLine, &l.done)
	if err != nil {
		return ShardInfo{}, err
	}
	if err := repairScanned(path, res, note); err != nil {
		return ShardInfo{}, err
	}
	info := res.info(name)
	if want != nil {
		if want.SHA256 == info.SHA256 && want.Records == info.Records {
			info.S3Key = want.S3Key
		} else {
			note("%s does not match the manifest (records %d→%d, sha256 %s→%s): manifest corrected",
				name, want.Records, info.Records, short(want.SHA256), short(info.SHA256))
		}
	}
	if err := l.fs.WriteFileAtomic(l.indexPath(num), encodeIndex(res.index())); err != nil {
		return ShardInfo{}, unwritable("write shard index", err)
	}
	note("%s: index rebuilt by scanning", name)
	return info, nil
}

// closeRecoveredOpen scans an .open shard left by a crash, repairs it and
// closes it (fsync, index, rename). It returns ok=false when the shard held
// no complete record and was removed.
func (l *Local) closeRecoveredOpen(num int, finals map[int]bool, maxNum *int, note func(string, ...any)) (ShardInfo, bool, error) {
	path := filepath.Join(l.shardDir, shardName(num)+openSuffix)
	res, err := scanFile(path, l.parseShardLine, &l.done)
	if err != nil {
		return ShardInfo{}, false, err
	}
	if len(res.lines) == 0 {
		if err := os.Remove(path); err != nil {
			return ShardInfo{}, false, unwritable("remove "+path, err)
		}
		note("removed open shard %s with no complete record", filepath.Base(path))
		return ShardInfo{}, false, nil
	}
	if err := repairScanned(path, res, note); err != nil {
		return ShardInfo{}, false, err
	}
	if err := fsyncPath(path); err != nil {
		return ShardInfo{}, false, err
	}
	target := num
	if finals[target] {
		*maxNum++
		target = *maxNum
	}
	finals[target] = true
	if err := l.fs.WriteFileAtomic(l.indexPath(target), encodeIndex(res.index())); err != nil {
		return ShardInfo{}, false, unwritable("write shard index", err)
	}
	final := filepath.Join(l.shardDir, shardName(target))
	if err := l.fs.Rename(path, final); err != nil {
		return ShardInfo{}, false, unwritable("rename "+path, err)
	}
	if err := l.fs.SyncDir(l.shardDir); err != nil {
		return ShardInfo{}, false, unwritable("fsync shards dir", err)
	}
	name := filepath.ToSlash(filepath.Join(shardsDirName, shardName(target)))
	note("open shard %s recovered with %d records and closed as %s", filepath.Base(path), len(res.lines), name)
	return res.info(name), true, nil
}

func fsyncPath(path string) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return unwritable("open "+path, err)
	}
	err = f.Sync()
	cerr := f.Close()
	if err != nil {
		return unwritable("fsync "+path, err)
	}
	if cerr != nil {
		return unwritable("close "+path, cerr)
	}
	return nil
}

func short(s string) string {
	if len(s) > 12 {
		return s[:12]
	}
	return s
}

type span struct{ start, end int64 }

// scanResult is what scanning a JSONL file kept: complete, valid lines
// whose input line was not already done.
type scanResult struct {
	lines     []int64
	spans     []span // kept byte ranges, merged when adjacent
	size      int64  // file size
	validEnd  int64  // end of the last complete valid line before the first bad one
	bad       bool   // a torn or invalid line was found at validEnd
	dups      int    // complete lines dropped because their input line was done
	keptBytes int64
	sha       [32]byte
	prompt    int64
	compl     int64
}

func (r *scanResult) info(name string) ShardInfo {
	return ShardInfo{
		Name: name, Records: int64(len(r.lines)), Bytes: r.keptBytes,
		SHA256: hex.EncodeToString(r.sha[:]), PromptTokens: r.prompt, CompletionTokens: r.compl,
	}
}

func (r *scanResult) index() *shardIndex {
	return &shardIndex{lines: r.lines, bytes: r.keptBytes, promptTokens: r.prompt, completionTokens: r.compl, sha256: r.sha}
}

// lineParser validates one line (without its newline) and returns its
// input line number and tokens.
type lineParser func(b []byte) (line, prompt, compl int64, ok bool)

// scanFile reads a JSONL file up to its first torn or invalid line, keeping
// the lines whose input line is not yet in done (and adding them to done).
func scanFile(path string, parse lineParser, done *Bitmap) (*scanResult, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("scan %s: %w", path, err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("scan %s: %w", path, err)
	}
	res := &scanResult{size: st.Size()}
	h := sha256.New()
	r := bufio.NewReaderSize(f, 1<<20)
	var off int64
	for off < res.size {
		b, err := r.ReadBytes('\n')
		if len(b) == 0 && err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return nil, fmt.Errorf("scan %s: %w", path, err)
		}
		if b[len(b)-1] != '\n' {
			res.bad = true // torn tail
			break
		}
		line, prompt, compl, ok := parse(b[:len(b)-1])
		if !ok {
			res.bad = true
			break
		}
		n := int64(len(b))
		if done.Set(line) {
			res.lines = append(res.lines, line)
			if k := len(res.spans); k > 0 && res.spans[k-1].end == off {
				res.spans[k-1].end = off + n
			} else {
				res.spans = append(res.spans, span{off, off + n})
			}
			res.keptBytes += n
			h.Write(b)
			res.prompt += prompt
			res.compl += compl
		} else {
			res.dups++
		}
		off += n
	}
	res.validEnd = off
	copy(res.sha[:], h.Sum(nil))
	return res, nil
}

// repairScanned makes the file hold exactly the kept lines: a bad tail is
// truncated; duplicate lines are removed by an atomic rewrite.
func repairScanned(path string, res *scanResult, note func(string, ...any)) error {
	base := filepath.Base(path)
	if res.dups == 0 {
		if !res.bad && res.validEnd == res.size {
			return nil
		}
		if err := os.Truncate(path, res.validEnd); err != nil {
			return unwritable("truncate "+path, err)
		}
		if err := fsyncPath(path); err != nil {
			return err
		}
		note("%s: torn or invalid tail truncated at byte %d (%d bytes dropped)", base, res.validEnd, res.size-res.validEnd)
		return nil
	}
	src, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("repair %s: %w", path, err)
	}
	defer src.Close()
	var buf bytes.Buffer
	buf.Grow(int(res.keptBytes))
	for _, s := range res.spans {
		if _, err := io.Copy(&buf, io.NewSectionReader(src, s.start, s.end-s.start)); err != nil {
			return fmt.Errorf("repair %s: %w", path, err)
		}
	}
	if err := WriteFileAtomic(path, buf.Bytes()); err != nil {
		return unwritable("repair", err)
	}
	note("%s: %d duplicate records removed", base, res.dups)
	if res.bad {
		note("%s: torn or invalid tail dropped at byte %d", base, res.validEnd)
	}
	return nil
}

// shardLine is the part of a shard line that recovery reads.
type shardLine struct {
	ID       string `json:"id"`
	Response *struct {
		Body json.RawMessage `json:"body"`
	} `json:"response"`
}

type usageOnly struct {
	Usage struct {
		PromptTokens     int64 `json:"prompt_tokens"`
		CompletionTokens int64 `json:"completion_tokens"`
	} `json:"usage"`
}

func (l *Local) parseShardLine(b []byte) (int64, int64, int64, bool) {
	var sl shardLine
	if err := json.Unmarshal(b, &sl); err != nil || sl.Response == nil {
		return 0, 0, 0, false
	}
	line, ok := lineFromID(sl.ID, l.opts.JobID)
	if !ok {
		return 0, 0, 0, false
	}
	var u usageOnly
	if len(sl.Response.Body) > 0 && sl.Response.Body[0] == '{' {
		_ = json.Unmarshal(sl.Response.Body, &u) // usage is best effort
	}
	return line, u.Usage.PromptTokens, u.Usage.CompletionTokens, true
}

type errorLine struct {
	Error *struct {
		Line int64 `json:"line"`
	} `json:"error"`
}

func parseErrorLine(b []byte) (int64, int64, int64, bool) {
	var el errorLine
	if err := json.Unmarshal(b, &el); err != nil || el.Error == nil || el.Error.Line <= 0 {
		return 0, 0, 0, false
	}
	return el.Error.Line, 0, 0, true
}

// lineFromID parses "<jobID>-<line>".
func lineFromID(id, jobID string) (int64, bool) {
	rest, ok := strings.CutPrefix(id, jobID+"-")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(rest, 10, 64)
	if err != nil || n <= 0 {
		return 0, false
	}
	return n, true
}
