package sink

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// Defaults for Options.
const (
	DefaultShardRecords = 10000
	DefaultShardSeconds = 300.0
	DefaultSyncEvery    = time.Second
)

const (
	shardsDirName = "shards"
	metaDirName   = ".gend"
	manifestName  = "manifest.json"
	errorsName    = "errors.jsonl"
	openSuffix    = ".open"

	// shardFlushBytes is how much an open shard buffers before it is
	// written to the file (a write(2), not an fsync). Every record is
	// written at once: the page cache survives a kill -9 of gend, so a
	// completed result is never regenerated after a process crash (only an
	// OS crash can lose what was not yet fsynced).
	shardFlushBytes = 1
	errorFlushBytes = 1
)

// Options configures a Local sink.
type Options struct {
	Dir          string        // output.dir
	JobID        string        // the "<job>" of every record id "<job>-<line>"
	ShardRecords int           // a shard closes at this many records (default 10000) ...
	ShardSeconds float64       // ... or this many seconds after its first record (default 300)
	SyncEvery    time.Duration // the open shard and errors.jsonl are fsynced at least this often (default 1s)
	// OnShardClosed is called after a shard is closed and manifest.json
	// lists it, in shard order, from the goroutine that closed it (a writer
	// or the sink's timer goroutine, or Sync/Retry/Close's caller), with no
	// lock of the sink held. It must not block long, and a caller must not
	// hold a lock OnShardClosed takes across WriteResult, WriteFailure, Sync,
	// Retry or Close.
	OnShardClosed func(ShardInfo)
	Logger        zerolog.Logger

	fs fileSystem // tests inject faults here; nil means the real file system
}

// ShardInfo describes one closed shard; it is also a manifest.json entry.
type ShardInfo struct {
	Name             string `json:"name"` // relative to Dir, e.g. "shards/part-00000.jsonl"
	Records          int64  `json:"records"`
	Bytes            int64  `json:"bytes"`
	SHA256           string `json:"sha256"`
	S3Key            string `json:"s3_key,omitempty"`
	PromptTokens     int64  `json:"prompt_tokens"`
	CompletionTokens int64  `json:"completion_tokens"`
}

// Manifest is manifest.json: the closed shards of a job.
type Manifest struct {
	JobID     string      `json:"job_id"`
	UpdatedAt time.Time   `json:"updated_at"`
	Shards    []ShardInfo `json:"shards"`
}

func (m *Manifest) clone() Manifest {
	c := *m
	c.Shards = append([]ShardInfo(nil), m.Shards...)
	return c
}

// Result is one completed request.
type Result struct {
	Line      int64  // 1-based input line: the identity used for resume
	CustomID  string // the input's custom_id
	RequestID string // the rid sent to the server
	Status    int    // HTTP status (200)
	// Body is the server's whole JSON response body. It is stored verbatim
	// when it is one line of valid JSON, compacted when it spans lines, and
	// as a JSON string when it is not JSON.
	Body                           []byte
	PromptTokens, CompletionTokens int64
	// BodyIsJSON says the caller already decoded Body as JSON (the backend
	// client does, to read usage), so the sink skips its own validation,
	// about half of its CPU per result. A body spanning several lines is
	// still compacted. Leave it false when unsure.
	BodyIsJSON bool
}

// Failure is one errors.jsonl line.
type Failure struct {
	Line      int64
	CustomID  string // "" is written as null
	Status    int    // 0: "response": null; else the server's status, request id and body
	RequestID string
	Body      []byte // the server's error body; stored as a JSON string when not JSON
	Code      string // invalid_input, duplicate_custom_id, request_failed, prompt_too_long, ...
	Message   string
}

// Recovered is what Open found in an existing output directory.
type Recovered struct {
	Done                           *Bitmap  // input lines already in shards or errors.jsonl: resume skips them
	Completed                      int64    // records in shards
	Failed                         int64    // lines in errors.jsonl
	PromptTokens, CompletionTokens int64    // summed over the shards
	Repaired                       []string // what recovery changed, for the log
}

// Stats are live counters of a Local sink. Completed and Failed count
// accepted records, including those not yet fsynced.
type Stats struct {
	Completed, Failed              int64
	PromptTokens, CompletionTokens int64
	Shards                         int    // closed shards in the manifest
	S3Uploaded                     int64  // shards in the manifest with an s3_key
	S3Bytes                        int64  // their bytes
	S3Pending                      int64  // closed shards without an s3_key
	PendingBytes                   int64  // accepted bytes not yet written to the files
	Unwritable                     string // last write error while the output is unwritable, else ""
}

// shard is one shard being filled or being closed.
type shard struct {
	num       int
	tmpPath   string // shards/part-NNNNN.jsonl.open
	finalPath string // shards/part-NNNNN.jsonl
	name      string // "shards/part-NNNNN.jsonl"
	f         outFile
	buf       []byte // accepted but not yet written
	written   int64  // bytes written to f
	records   int64
	lines     []int64
	hash      hash.Hash
	prompt    int64
	compl     int64
	openedAt  time.Time

	// close progress, so that a failed close resumes where it stopped
	synced, indexed, renamed, dirSynced, listed bool
}

func (s *shard) size() int64 { return s.written + int64(len(s.buf)) }

// Local writes results durably into output.dir. All methods are safe for
// concurrent use.
type Local struct {
	opts     Options
	fs       fileSystem
	log      zerolog.Logger
	dir      string
	shardDir string
	metaDir  string

	mu         sync.Mutex // guards everything below up to notifyMu
	cur        *shard     // nil until the next record arrives
	sealed     []*shard   // full shards not yet closed, oldest first
	nextNum    int
	done       Bitmap
	completed  int64
	failed     int64
	prompt     int64
	compl      int64
	errFile    outFile
	errBuf     []byte
	manifest   Manifest
	mfDirty    bool   // the in-memory manifest differs from manifest.json
	mfSeq      uint64 // bumped on every manifest change
	notify     []ShardInfo
	unwritable string
	closed     bool

	encBufs sync.Pool // *[]byte scratch buffers for encoding outside the lock

	notifyMu sync.Mutex // serialises OnShardClosed calls, so they come in order

	mfWriteMu sync.Mutex // serialises manifest.json writes
	mfWritten uint64     // seq of the last manifest written (under mfWriteMu)

	stopOnce sync.Once
	stop     chan struct{}
	wg       sync.WaitGroup
}

// Open creates output.dir or recovers it after a clean stop or a crash (see
// docs/durability.md), and starts the goroutine that fsyncs and closes aged
// shards. Close stops it.
func Open(opts Options) (*Local, Recovered, error) {
	if opts.Dir == "" {
		return nil, Recovered{}, errors.New("open sink: empty output dir")
	}
	if opts.JobID == "" {
		return nil, Recovered{}, errors.New("open sink: empty job id")
	}
	if opts.ShardRecords <= 0 {
		opts.ShardRecords = DefaultShardRecords
	}
	if opts.ShardSeconds <= 0 {
		opts.ShardSeconds = DefaultShardSeconds
	}
	if opts.SyncEvery <= 0 {
		opts.SyncEvery = DefaultSyncEvery
	}
	fsys := opts.fs
	if fsys == nil {
		fsys = osFS{}
	}
	l := &Local{
		opts:     opts,
		fs:       fsys,
		log:      opts.Logger.With().Str("component", "sink").Logger(),
		dir:      opts.Dir,
		shardDir: filepath.Join(opts.Dir, shardsDirName),
		metaDir:  filepath.Join(opts.Dir, metaDirName),
		stop:     make(chan struct{}),
	}
	l.encBufs.New = func() any { b := make([]byte, 0, 16<<10); return &b }
	for _, d := range []string{l.dir, l.shardDir, l.metaDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return nil, Recovered{}, unwritable("open sink: create "+d, err)
		}
	}
	rec, err := l.recover()
	if err != nil {
		return nil, Recovered{}, fmt.Errorf("open sink %s: %w", opts.Dir, err)
	}
	ef, err := l.fs.OpenAppend(filepath.Join(l.dir, errorsName))
	if err != nil {
		return nil, Recovered{}, unwritable("open sink: open errors.jsonl", err)
	}
	l.errFile = ef
	if len(rec.Repaired) > 0 {
		l.log.Warn().Strs("repaired", rec.Repaired).Msg("output directory repaired")
	}
	l.log.Info().Int64("completed", rec.Completed).Int64("failed", rec.Failed).
		Int("shards", len(l.manifest.Shards)).Msg("output directory open")
	l.wg.Add(1)
	go l.timerLoop()
	return l, rec, nil
}

// WriteResult appends one completed request to the open shard. The record
// is accepted when WriteResult returns nil or an error wrapping
// ErrOutputUnwritable; in the second case it is kept in memory and written
// by a later Retry (or any later write), so the caller must not write it
// again: it should stop dispatching and call Retry until it returns nil.
// Other errors (ErrClosed, ErrDuplicate, a bad line number) mean the record
// was not accepted.
func (l *Local) WriteResult(r Result) error {
	if r.Line <= 0 {
		return fmt.Errorf("write result: line %d out of range", r.Line)
	}
	// Encode (and validate the body) before taking the lock.
	bp := l.encBufs.Get().(*[]byte)
	enc := appendResult((*bp)[:0], l.opts.JobID, &r)
	defer func() {
		*bp = enc
		l.encBufs.Put(bp)
	}()
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	if l.done.Get(r.Line) {
		l.mu.Unlock()
		return fmt.Errorf("write result line %d: %w", r.Line, ErrDuplicate)
	}
	now := time.Now()
	if l.cur != nil && l.aged(l.cur, now) {
		l.sealLocked()
	}
	if l.cur == nil {
		l.cur = l.newShardLocked(now)
	}
	s := l.cur
	s.buf = append(s.buf, enc...)
	s.hash.Write(enc)
	s.records++
	s.lines = append(s.lines, r.Line)
	s.prompt += r.PromptTokens
	s.compl += r.CompletionTokens
	l.done.Set(r.Line)
	l.completed++
	l.prompt += r.PromptTokens
	l.compl += r.CompletionTokens
	if s.records >= int64(l.opts.ShardRecords) {
		l.sealLocked()
	}
	var err error
	if len(l.sealed) > 0 || len(s.buf) >= shardFlushBytes || l.unwritable != "" {
		err = l.flushLocked()
	}
	l.mu.Unlock()
	l.deliver()
	return err
}

// WriteFailure appends one line to errors.jsonl. Acceptance and errors are
// as for WriteResult.
func (l *Local) WriteFailure(f Failure) error {
	if f.Line <= 0 {
		return fmt.Errorf("write failure: line %d out of range", f.Line)
	}
	bp := l.encBufs.Get().(*[]byte)
	enc := appendFailure((*bp)[:0], l.opts.JobID, &f)
	defer func() {
		*bp = enc
		l.encBufs.Put(bp)
	}()
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return ErrClosed
	}
	if l.done.Get(f.Line) {
		l.mu.Unlock()
		return fmt.Errorf("write failure line %d: %w", f.Line, ErrDuplicate)
	}
	l.errBuf = append(l.errBuf, enc...)
	l.done.Set(f.Line)
	l.failed++
	var err error
	if len(l.errBuf) >= errorFlushBytes || len(l.sealed) > 0 || l.unwritable != "" {
		err = l.flushLocked()
	}
	l.mu.Unlock()
	l.deliver()
	return err
}

// Sync writes everything accepted so far and fsyncs the open shard and
// errors.jsonl (used on drain and shutdown). It returns an error wrapping
// ErrOutputUnwritable while the output refuses writes.
func (l *Local) Sync() error {
	l.mu.Lock()
	err := l.flushLocked()
	files := l.openFilesLocked()
	l.mu.Unlock()
	l.deliver()
	if err != nil {
		return err
	}
	return l.syncFiles(files)
}

// Retry re-attempts every pending write, close and manifest update after an
// ErrOutputUnwritable; nil means everything accepted is on disk. It is Sync
// under the name the caller's pause/resume logic uses.
func (l *Local) Retry() error { return l.Sync() }

// Close closes the open shard (a final, possibly short, shard), fsyncs
// errors.jsonl, writes manifest.json and stops the timer goroutine. When it
// fails (output unwritable) nothing is lost: Close may be called again.
func (l *Local) Close() error {
	l.stopOnce.Do(func() { close(l.stop) })
	l.wg.Wait()
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		return nil
	}
	if l.cur != nil && l.cur.records > 0 {
		l.sealLocked()
	}
	err := l.flushLocked()
	if err == nil && l.errFile != nil {
		if serr := l.errFile.Sync(); serr != nil {
			err = unwritable("fsync errors.jsonl", serr)
		}
	}
	if err == nil && l.errFile != nil {
		if cerr := l.errFile.Close(); cerr != nil {
			err = unwritable("close errors.jsonl", cerr)
		} else {
			l.errFile = nil
		}
	}
	if err == nil {
		l.closed = true
	}
	l.mu.Unlock()
	l.deliver()
	if err != nil {
		return fmt.Errorf("close sink: %w", err)
	}
	return nil
}

// Manifest returns a copy of the manifest.
func (l *Local) Manifest() Manifest {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.manifest.clone()
}

// Dir returns the output directory.
func (l *Local) Dir() string { return l.dir }

// Stats returns live counters.
func (l *Local) Stats() Stats {
	l.mu.Lock()
	defer l.mu.Unlock()
	st := Stats{
		Completed: l.completed, Failed: l.failed,
		PromptTokens: l.prompt, CompletionTokens: l.compl,
		Shards: len(l.manifest.Shards), Unwritable: l.unwritable,
		PendingBytes: int64(len(l.errBuf)),
	}
	for _, s := range l.manifest.Shards {
		if s.S3Key != "" {
			st.S3Uploaded++
			st.S3Bytes += s.Bytes
		} else {
			st.S3Pending++
		}
	}
	for _, s := range l.sealed {
		st.PendingBytes += int64(len(s.buf))
	}
	if l.cur != nil {
		st.PendingBytes += int64(len(l.cur.buf))
	}
	return st
}

// SetS3Key records that a closed shard (by its manifest name) was uploaded
// under key, and rewrites manifest.json atomically.
func (l *Local) SetS3Key(shardName, key string) error {
	l.mu.Lock()
	found := false
	for i := range l.manifest.Shards {
		if l.manifest.Shards[i].Name == shardName {
			if l.manifest.Shards[i].S3Key == key {
				l.mu.Unlock()
				return nil
			}
			l.manifest.Shards[i].S3Key = key
			found = true
			break
		}
	}
	if !found {
		l.mu.Unlock()
		return fmt.Errorf("set s3 key of %s: not in the manifest", shardName)
	}
	data, seq := l.bumpManifestLocked()
	l.mu.Unlock()
	if err := l.writeManifest(data, seq); err != nil {
		l.mu.Lock()
		l.mfDirty = true
		l.mu.Unlock()
		return fmt.Errorf("set s3 key of %s: %w", shardName, err)
	}
	return nil
}

// aged reports whether s has reached its maximum age.
func (l *Local) aged(s *shard, now time.Time) bool {
	return s.records > 0 && now.Sub(s.openedAt).Seconds() >= l.opts.ShardSeconds
}

func (l *Local) newShardLocked(now time.Time) *shard {
	n := l.nextNum
	l.nextNum++
	name := shardName(n)
	return &shard{
		num:       n,
		name:      filepath.ToSlash(filepath.Join(shardsDirName, name)),
		finalPath: filepath.Join(l.shardDir, name),
		tmpPath:   filepath.Join(l.shardDir, name+openSuffix),
		hash:      sha256.New(),
		openedAt:  now,
		buf:       make([]byte, 0, shardFlushBytes+64<<10),
	}
}

func shardName(n int) string { return fmt.Sprintf("part-%05d.jsonl", n) }

func (l *Local) sealLocked() {
	if l.cur == nil {
		return
	}
	l.sealed = append(l.sealed, l.cur)
	l.cur = nil
}

// flushLocked writes what is buffered, closes sealed shards and rewrites a
// dirty manifest. Every step records its progress, so after an error the
// next call resumes where this one stopped and nothing is written twice.
func (l *Local) flushLocked() error {
	var errs []error
	for len(l.sealed) > 0 {
		if err := l.closeShardLocked(l.sealed[0]); err != nil {
			errs = append(errs, err)
			break
		}
		l.sealed[0] = nil
		l.sealed = l.sealed[1:]
	}
	// The open shard's file is created only once the shards before it are
	// closed, so at most one .open file exists at a time.
	if len(l.sealed) == 0 && l.cur != nil && len(l.cur.buf) > 0 {
		if err := l.writeShardLocked(l.cur); err != nil {
			errs = append(errs, err)
		}
	}
	if len(l.errBuf) > 0 && l.errFile != nil {
		n, err := l.errFile.Write(l.errBuf)
		l.errBuf = l.errBuf[:copy(l.errBuf, l.errBuf[n:])]
		if err != nil {
			errs = append(errs, unwritable("write errors.jsonl", err))
		}
	}
	if l.mfDirty {
		data, seq := l.bumpManifestLocked()
		if err := l.writeManifest(data, seq); err != nil {
			l.mfDirty = true
			errs = append(errs, err)
		}
	}
	err := errors.Join(errs...)
	l.noteLocked(err)
	return err
}

// noteLocked remembers whether the output is unwritable and logs changes.
func (l *Local) noteLocked(err error) {
	if err == nil {
		if l.unwritable != "" {
			l.log.Info().Msg("output writable again")
			l.unwritable = ""
		}
		return
	}
	msg := err.Error()
	if msg != l.unwritable {
		l.log.Warn().Err(err).Msg("output unwritable; records kept in memory until retried")
	}
	l.unwritable = msg
}

// writeShardLocked writes s.buf to the shard's temporary file, creating it.
func (l *Local) writeShardLocked(s *shard) error {
	if s.f == nil {
		f, err := l.fs.Create(s.tmpPath)
		if err != nil {
			return unwritable("create "+s.tmpPath, err)
		}
		s.f = f
	}
	n, err := s.f.Write(s.buf)
	s.written += int64(n)
	s.buf = s.buf[:copy(s.buf, s.buf[n:])]
	if err != nil {
		return unwritable("write "+s.tmpPath, err)
	}
	return nil
}

// closeShardLocked runs (or resumes) the close protocol of a sealed shard:
// write, fsync, index (fsynced), rename, fsync dir, manifest.
func (l *Local) closeShardLocked(s *shard) error {
	if !s.renamed {
		if len(s.buf) > 0 || s.f == nil {
			if err := l.writeShardLocked(s); err != nil {
				return err
			}
		}
		if !s.synced {
			if err := s.f.Sync(); err != nil {
				return unwritable("fsync "+s.tmpPath, err)
			}
			s.synced = true
		}
		if !s.indexed {
			ix := &shardIndex{lines: s.lines, bytes: s.written, promptTokens: s.prompt, completionTokens: s.compl}
			copy(ix.sha256[:], s.hash.Sum(nil))
			if err := l.fs.WriteFileAtomic(l.indexPath(s.num), encodeIndex(ix)); err != nil {
				return unwritable("write shard index", err)
			}
			s.indexed = true
		}
		if err := l.fs.Rename(s.tmpPath, s.finalPath); err != nil {
			return unwritable("rename "+s.tmpPath, err)
		}
		s.renamed = true
		_ = s.f.Close()
	}
	if !s.dirSynced {
		if err := l.fs.SyncDir(l.shardDir); err != nil {
			return unwritable("fsync shards dir", err)
		}
		s.dirSynced = true
	}
	if !s.listed {
		info := ShardInfo{
			Name: s.name, Records: s.records, Bytes: s.written,
			SHA256: hex.EncodeToString(s.hash.Sum(nil)), PromptTokens: s.prompt, CompletionTokens: s.compl,
		}
		l.manifest.Shards = append(l.manifest.Shards, info)
		s.listed = true
		l.mfDirty = true
	}
	data, seq := l.bumpManifestLocked()
	if err := l.writeManifest(data, seq); err != nil {
		l.mfDirty = true
		return err
	}
	for i := len(l.manifest.Shards) - 1; i >= 0; i-- {
		if l.manifest.Shards[i].Name == s.name {
			l.notify = append(l.notify, l.manifest.Shards[i])
			break
		}
	}
	s.buf, s.lines = nil, nil
	return nil
}

func (l *Local) indexPath(num int) string {
	return filepath.Join(l.metaDir, fmt.Sprintf("part-%05d.lines", num))
}

// bumpManifestLocked marshals the manifest as it is now and gives it a new
// sequence number; the caller writes it with writeManifest.
func (l *Local) bumpManifestLocked() ([]byte, uint64) {
	l.manifest.UpdatedAt = time.Now().UTC()
	l.mfSeq++
	l.mfDirty = false
	data, err := json.MarshalIndent(&l.manifest, "", "  ")
	if err != nil {
		panic(fmt.Sprintf("marshal manifest: %v", err)) // plain data: cannot fail
	}
	return append(data, '\n'), l.mfSeq
}

// writeManifest writes one marshaled manifest unless a newer one was
// already written.
func (l *Local) writeManifest(data []byte, seq uint64) error {
	l.mfWriteMu.Lock()
	defer l.mfWriteMu.Unlock()
	if seq <= l.mfWritten {
		return nil
	}
	if err := l.fs.WriteFileAtomic(filepath.Join(l.dir, manifestName), data); err != nil {
		return unwritable("write manifest", err)
	}
	l.mfWritten = seq
	return nil
}

// deliver calls OnShardClosed for the shards closed since the last call, in
// order, with no lock of the sink held.
func (l *Local) deliver() {
	l.notifyMu.Lock()
	defer l.notifyMu.Unlock()
	l.mu.Lock()
	pending := l.notify
	l.notify = nil
	l.mu.Unlock()
	if l.opts.OnShardClosed == nil {
		return
	}
	for _, info := range pending {
		l.opts.OnShardClosed(info)
	}
}

func (l *Local) openFilesLocked() []outFile {
	var files []outFile
	if l.cur != nil && l.cur.f != nil {
		files = append(files, l.cur.f)
	}
	if l.errFile != nil {
		files = append(files, l.errFile)
	}
	return files
}

// syncFiles fsyncs files without holding the lock. A file closed meanwhile
// by a shard close was fsynced by that close.
func (l *Local) syncFiles(files []outFile) error {
	var errs []error
	for _, f := range files {
		if err := f.Sync(); err != nil && !errors.Is(err, os.ErrClosed) {
			errs = append(errs, unwritable("fsync", err))
		}
	}
	err := errors.Join(errs...)
	if err != nil {
		l.mu.Lock()
		l.noteLocked(err)
		l.mu.Unlock()
	}
	return err
}

// timerLoop closes aged shards and fsyncs at least every SyncEvery. It stops
// when Close is called.
func (l *Local) timerLoop() {
	defer l.wg.Done()
	t := time.NewTicker(l.opts.SyncEvery)
	defer t.Stop()
	for {
		select {
		case <-l.stop:
			return
		case now := <-t.C:
			l.mu.Lock()
			if l.cur != nil && l.aged(l.cur, now) {
				l.sealLocked()
			}
			err := l.flushLocked()
			files := l.openFilesLocked()
			l.mu.Unlock()
			l.deliver()
			if err == nil {
				_ = l.syncFiles(files) // errors are noted and logged by syncFiles
			}
		}
	}
}

// Verify re-reads every closed shard present locally and compares its size
// and sha256 with the manifest. It returns one line per mismatch (nil when
// all match). It reads every byte: use it on demand, not at start-up.
func (l *Local) Verify() ([]string, error) {
	m := l.Manifest()
	var problems []string
	for _, s := range m.Shards {
		f, err := os.Open(filepath.Join(l.dir, filepath.FromSlash(s.Name)))
		if errors.Is(err, os.ErrNotExist) && s.S3Key != "" {
			continue
		}
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", s.Name, err))
			continue
		}
		h := sha256.New()
		n, err := io.Copy(h, f)
		_ = f.Close()
		if err != nil {
			return problems, fmt.Errorf("verify %s: %w", s.Name, err)
		}
		if sum := hex.EncodeToString(h.Sum(nil)); n != s.Bytes || sum != s.SHA256 {
			problems = append(problems, fmt.Sprintf("%s: %d bytes sha256 %s, manifest says %d bytes sha256 %s",
				s.Name, n, short(sum), s.Bytes, short(s.SHA256)))
		}
	}
	return problems, nil
}
