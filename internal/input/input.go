package input

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
)

// Orders.
const (
	OrderInput   = "input"
	OrderShuffle = "shuffle"
)

// Options say how a job's input becomes requests.
type Options struct {
	Endpoint   string         // request.endpoint: EndpointChat (default) or EndpointCompletions
	Model      string         // request.model ("" = leave out; SGLang ignores it, vLLM needs it)
	Params     map[string]any // request.params; merged into every body; the line's fields override
	Order      string         // OrderInput (default) or OrderShuffle
	Seed       int64          // shuffle seed
	ShardIndex int            // process only items with ordinal % ShardCount == ShardIndex
	ShardCount int            // 0 or 1: all
	TempDir    string         // where a shuffle of a compressed input spills a decompressed copy ("" = os.TempDir())
	// Skip reports lines already done (resume): they are not emitted and not
	// reported again, but their ids still count for duplicate detection.
	Skip func(line int64) bool

	// ExpectedLines optionally gives the number of non-empty lines of the
	// whole file (Count with no sharding) to size the duplicate set exactly;
	// 0 = estimate from the file size while reading.
	ExpectedLines int64
	// MaxLineBytes bounds one line (default DefaultMaxLineBytes); a longer
	// line is a BadLine.
	MaxLineBytes int
}

// Item is one request to send.
type Item struct {
	Line        int64  // 1-based physical line number in the (decompressed) file
	CustomID    string // custom_id, or id; numbers as their decimal string
	Endpoint    string // the endpoint for this item (an OpenAI Batch "url" wins over Options.Endpoint)
	Body        []byte // complete JSON request body, without stream or a request id; owned by the caller
	MaxTokens   int    // effective max output tokens (max_completion_tokens, else max_tokens), 0 if unset
	PromptBytes int    // bytes of prompt text (message contents / prompt), for rough token estimates
}

// BadLine is an input line that gives no request; it goes to errors.jsonl.
type BadLine struct {
	Line     int64
	CustomID string // "" if none could be read
	Code     string // CodeInvalidInput or CodeDuplicateID
	Message  string // e.g. `line 17: "messages" must be an array, got an object`
}

func (o Options) validate() error {
	var errs []error
	switch o.Endpoint {
	case "", EndpointChat, EndpointCompletions:
	default:
		errs = append(errs, fmt.Errorf("endpoint %q: must be %s or %s", o.Endpoint, EndpointChat, EndpointCompletions))
	}
	switch o.Order {
	case "", OrderInput, OrderShuffle:
	default:
		errs = append(errs, fmt.Errorf("order %q: must be %s or %s", o.Order, OrderInput, OrderShuffle))
	}
	if o.ShardCount < 0 {
		errs = append(errs, fmt.Errorf("shard count %d: must not be negative", o.ShardCount))
	}
	if o.ShardIndex < 0 || o.ShardIndex >= max(o.ShardCount, 1) {
		errs = append(errs, fmt.Errorf("shard index %d: must be in [0, %d)", o.ShardIndex, max(o.ShardCount, 1)))
	}
	if o.MaxLineBytes < 0 {
		errs = append(errs, fmt.Errorf("max line bytes %d: must not be negative", o.MaxLineBytes))
	}
	if o.ExpectedLines < 0 {
		errs = append(errs, fmt.Errorf("expected lines %d: must not be negative", o.ExpectedLines))
	}
	return errors.Join(errs...)
}

func (o Options) maxLine() int {
	if o.MaxLineBytes > 0 {
		return o.MaxLineBytes
	}
	return DefaultMaxLineBytes
}

func (o Options) shards() (n, i int64) {
	if o.ShardCount <= 1 {
		return 1, 0
	}
	return int64(o.ShardCount), int64(o.ShardIndex)
}

// shardTotal is how many of total ordinals fall in shard i of n.
func shardTotal(total, n, i int64) int64 {
	if total <= i {
		return 0
	}
	return (total-i-1)/n + 1
}

// ctxCheckEvery is how many lines pass between context checks.
const ctxCheckEvery = 4096

// Count does a streaming pass and returns the number of non-empty lines of
// path that the shard of opts covers (DESIGN's total). Skip is ignored:
// resumed lines are part of the total.
func Count(ctx context.Context, path string, opts Options) (int64, error) {
	if err := opts.validate(); err != nil {
		return 0, fmt.Errorf("count %s: %w", path, err)
	}
	src, err := openSource(path, opts.maxLine())
	if err != nil {
		return 0, fmt.Errorf("count: %w", err)
	}
	defer src.Close()
	var total, lines int64
	for {
		lines++
		if lines%ctxCheckEvery == 0 {
			if err := ctx.Err(); err != nil {
				return 0, fmt.Errorf("count %s: %w", path, err)
			}
		}
		line, _, tooLong, err := src.readLine()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return 0, fmt.Errorf("count %s line %d: %w", path, lines, err)
		}
		if tooLong || len(trimSpace(line)) > 0 {
			total++
		}
	}
	n, i := opts.shards()
	return shardTotal(total, n, i), nil
}

// Reader yields the items and bad lines of one input file. It is not safe
// for concurrent use.
type Reader struct {
	ctx     context.Context
	path    string
	opts    Options
	shardN  int64
	shardI  int64
	p       *parser
	ids     *idSet
	mem     *mem // the large arrays (ids, shuffle index)
	cleanup runtime.Cleanup

	cur *source // the source being read in order, for size estimates
	// input order
	src     *source
	line    int64 // physical lines read
	ordinal int64 // non-empty lines read
	// shuffle
	sh *shuffled

	closed bool
}

// Open starts reading path. With OrderShuffle it first indexes the whole
// file (and decompresses a compressed one into TempDir), which takes one
// pass; ctx bounds that pass and later reads.
func Open(ctx context.Context, path string, opts Options) (*Reader, error) {
	if err := opts.validate(); err != nil {
		return nil, fmt.Errorf("open input %s: %w", path, err)
	}
	p, err := newParser(opts)
	if err != nil {
		return nil, fmt.Errorf("open input %s: %w", path, err)
	}
	src, err := openSource(path, opts.maxLine())
	if err != nil {
		return nil, err
	}
	r := &Reader{ctx: ctx, path: path, opts: opts, p: p, mem: newMem()}
	r.shardN, r.shardI = opts.shards()
	r.cleanup = runtime.AddCleanup(r, (*mem).releaseAll, r.mem)
	r.cur = src
	r.ids = newIDSet(r.mem, r.expectedLines(src))
	r.ids.estimate = func() int64 {
		if f := r.cur.progress(); f > 0.01 {
			return int64(float64(r.ordinal) / f)
		}
		return r.ordinal * 2
	}
	if opts.Order != OrderShuffle {
		r.src = src
		return r, nil
	}
	sh, err := r.index(src)
	if err != nil {
		r.cleanup.Stop()
		r.mem.releaseAll()
		return nil, fmt.Errorf("open input %s: %w", path, err)
	}
	r.sh = sh
	return r, nil
}

// expectedLines sizes the duplicate set: the caller's count, or a guess
// from the file size and the first lines.
func (r *Reader) expectedLines(src *source) int64 {
	if r.opts.ExpectedLines > 0 {
		return r.opts.ExpectedLines
	}
	if src.compressed {
		return 1 << 20
	}
	head, _ := src.br.Peek(readBufSize)
	nl := int64(0)
	for _, c := range head {
		if c == '\n' {
			nl++
		}
	}
	if nl == 0 || len(head) < readBufSize {
		return nl + 1
	}
	return src.size / (int64(len(head)) / nl)
}

func (r *Reader) mine(ordinal int64) bool { return ordinal%r.shardN == r.shardI }

// Next returns the next item, or a bad line (then the Item is zero), or
// io.EOF after the last one. Other errors (I/O, a cancelled context) end
// the reading.
func (r *Reader) Next() (Item, *BadLine, error) {
	// r owns the mapped arrays that the code below reads through other
	// pointers: keep its cleanup from running before Next returns.
	defer runtime.KeepAlive(r)
	if r.closed {
		return Item{}, nil, fmt.Errorf("read input %s: reader closed", r.path)
	}
	if r.sh != nil {
		return r.nextShuffled()
	}
	for {
		if r.line%ctxCheckEvery == 0 {
			if err := r.ctx.Err(); err != nil {
				return Item{}, nil, fmt.Errorf("read input %s: %w", r.path, err)
			}
		}
		raw, _, tooLong, err := r.src.readLine()
		if errors.Is(err, io.EOF) {
			return Item{}, nil, io.EOF
		}
		if err != nil {
			return Item{}, nil, fmt.Errorf("read input %s line %d: %w", r.path, r.line+1, err)
		}
		r.line++
		if !tooLong {
			raw = trimSpace(raw)
			if len(raw) == 0 {
				continue
			}
		}
		ord := r.ordinal
		r.ordinal++
		id, msg := r.classify(raw, tooLong)
		dup := id != nil && r.ids.add(id)
		if !r.mine(ord) || (r.opts.Skip != nil && r.opts.Skip(r.line)) {
			continue
		}
		it, bad := r.emit(r.line, id, msg, dup)
		return it, bad, nil
	}
}

// classify splits a non-empty line and reads its id. msg says why the line
// is unusable ("" when it may be). id is nil when none could be read; it is
// valid until the next line.
func (r *Reader) classify(line []byte, tooLong bool) ([]byte, string) {
	if tooLong {
		return nil, fmt.Sprintf("line is longer than %d bytes", r.opts.maxLine())
	}
	if msg := r.p.split(line); msg != "" {
		return nil, msg
	}
	return r.p.readID()
}

// emit turns a classified line of this shard into an item or a bad line.
func (r *Reader) emit(lineNo int64, id []byte, msg string, dup bool) (Item, *BadLine) {
	switch {
	case dup:
		return Item{}, badLine(lineNo, id, CodeDuplicateID,
			fmt.Sprintf("duplicate custom_id %q: an earlier line has it", clip(id)))
	case msg != "":
		return Item{}, badLine(lineNo, id, CodeInvalidInput, msg)
	}
	it, msg := r.p.build(id)
	if msg != "" {
		return Item{}, badLine(lineNo, id, CodeInvalidInput, msg)
	}
	it.Line = lineNo
	return it, nil
}

// Close releases the file, the memory of the duplicate set and of a
// shuffle's index, and a shuffle's decompressed copy. It is safe to call
// twice.
func (r *Reader) Close() error {
	if r.closed {
		return nil
	}
	r.closed = true
	r.cleanup.Stop()
	r.mem.releaseAll()
	r.ids = nil
	var err error
	if r.src != nil {
		err = r.src.Close()
	}
	if r.sh != nil {
		err = errors.Join(err, r.sh.Close())
	}
	if err != nil {
		return fmt.Errorf("close input %s: %w", r.path, err)
	}
	return nil
}
