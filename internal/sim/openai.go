package sim

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strings"
	"time"
)

// Token ids of the stop tokens reported in matched_stop (Qwen3 vocabulary).
const (
	imEndToken     = 151645 // <|im_end|>, chat
	endOfTextToken = 151643 // <|endoftext|>, completions
	maxBodyBytes   = 64 << 20
)

// genRequest is the subset of an OpenAI chat or completion request gensim
// reads; unknown fields are ignored like SGLang does.
type genRequest struct {
	Model               string          `json:"model"`
	Messages            []chatMessage   `json:"messages"`
	Prompt              json.RawMessage `json:"prompt"`
	MaxCompletionTokens *int            `json:"max_completion_tokens"`
	MaxTokens           *int            `json:"max_tokens"`
	Stream              bool            `json:"stream"`
	StreamOptions       *struct {
		IncludeUsage         bool `json:"include_usage"`
		ContinuousUsageStats bool `json:"continuous_usage_stats"`
	} `json:"stream_options"`
	ChatTemplateKwargs map[string]any  `json:"chat_template_kwargs"`
	SeparateReasoning  *bool           `json:"separate_reasoning"`
	Rid                json.RawMessage `json:"rid"`
}

type chatMessage struct {
	Role    string          `json:"role"`
	Content json.RawMessage `json:"content"`
}

// promptText returns the text that is tokenised and hashed.
func (g *genRequest) promptText(chat bool) (string, int, error) {
	if chat {
		if len(g.Messages) == 0 {
			return "", 0, fmt.Errorf("Messages cannot be empty.")
		}
		var b strings.Builder
		for i, m := range g.Messages {
			if i > 0 {
				b.WriteByte('\n')
			}
			var s string
			if err := json.Unmarshal(m.Content, &s); err == nil {
				b.WriteString(s)
				continue
			}
			var parts []struct {
				Type string `json:"type"`
				Text string `json:"text"`
			}
			if len(m.Content) > 0 && string(m.Content) != "null" {
				if err := json.Unmarshal(m.Content, &parts); err != nil {
					return "", 0, fmt.Errorf("messages[%d].content: must be a string or a list of content parts", i)
				}
			}
			for _, p := range parts {
				b.WriteString(p.Text)
			}
		}
		t := b.String()
		return t, promptTokens(t), nil
	}
	var s string
	if err := json.Unmarshal(g.Prompt, &s); err == nil {
		if s == "" {
			return "", 0, fmt.Errorf("Prompt cannot be empty")
		}
		return s, promptTokens(s), nil
	}
	var list []string
	if err := json.Unmarshal(g.Prompt, &list); err == nil {
		if len(list) != 1 || list[0] == "" {
			return "", 0, fmt.Errorf("Prompt cannot be empty")
		}
		return list[0], promptTokens(list[0]), nil
	}
	var ids []int
	if err := json.Unmarshal(g.Prompt, &ids); err == nil && len(ids) > 0 {
		return string(g.Prompt), len(ids), nil
	}
	return "", 0, fmt.Errorf("Prompt cannot be empty")
}

func (g *genRequest) thinking() bool {
	for _, k := range []string{"enable_thinking", "thinking"} {
		if v, ok := g.ChatTemplateKwargs[k].(bool); ok && v {
			return true
		}
	}
	return false
}

func (g *genRequest) rid() string {
	var s string
	if json.Unmarshal(g.Rid, &s) == nil {
		return s
	}
	return ""
}

// Wire types, with fields in SGLang's order.

type usageInfo struct {
	PromptTokens        int             `json:"prompt_tokens"`
	TotalTokens         int             `json:"total_tokens"`
	CompletionTokens    int             `json:"completion_tokens"`
	PromptTokensDetails *map[string]int `json:"prompt_tokens_details"`
	ReasoningTokens     int             `json:"reasoning_tokens"`
}

type respMessage struct {
	Role             string  `json:"role"`
	Content          string  `json:"content"`
	ReasoningContent *string `json:"reasoning_content"`
	ToolCalls        *[]any  `json:"tool_calls"`
}

type respChoice struct {
	Index        int          `json:"index"`
	Message      *respMessage `json:"message,omitempty"`
	Text         *string      `json:"text,omitempty"`
	Logprobs     *struct{}    `json:"logprobs"`
	FinishReason string       `json:"finish_reason"`
	MatchedStop  *int         `json:"matched_stop"`
}

type response struct {
	ID       string            `json:"id"`
	Object   string            `json:"object"`
	Created  int64             `json:"created"`
	Model    string            `json:"model"`
	Choices  []respChoice      `json:"choices"`
	Usage    usageInfo         `json:"usage"`
	Metadata map[string]string `json:"metadata"`
}

type delta struct {
	ReasoningContent *string `json:"reasoning_content"`
	Role             string  `json:"role,omitempty"`
	Content          *string `json:"content,omitempty"`
}

type chunkChoice struct {
	Index        int       `json:"index"`
	Delta        *delta    `json:"delta,omitempty"`
	Text         *string   `json:"text,omitempty"`
	Logprobs     *struct{} `json:"logprobs"`
	FinishReason *string   `json:"finish_reason"`
	MatchedStop  *int      `json:"matched_stop"`
}

type chunk struct {
	ID      string        `json:"id"`
	Object  string        `json:"object"`
	Created int64         `json:"created"`
	Model   string        `json:"model"`
	Choices []chunkChoice `json:"choices"`
	Usage   *usageInfo    `json:"usage,omitempty"`
}

type errorBody struct {
	Object  string  `json:"object"`
	Message string  `json:"message"`
	Type    string  `json:"type"`
	Param   *string `json:"param"`
	Code    int     `json:"code"`
}

// marshal encodes compactly without HTML escaping (like Python's JSON).
func marshal(v any) []byte {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		// Only the package's own wire types are encoded here; they always encode.
		panic(fmt.Sprintf("gensim: encode %T: %v", v, err))
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n"))
}

func writeJSON(w http.ResponseWriter, status int, body []byte) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", fmt.Sprint(len(body)))
	w.WriteHeader(status)
	_, _ = w.Write(body) // the client may be gone; nothing to do then
}

// SGLang error types as they appear in its bodies.
const (
	typeBadRequest  = "BadRequestError"
	typeValidation  = "Bad Request"
	typeInternal    = "InternalServerError"
	typeQueueFull   = "503"
	typeQueueStream = "SERVICE_UNAVAILABLE"
)

const (
	msgQueueFull   = "The request queue is full."
	msgOOM         = "Out of memory even after retracting all other requests in the decode batch. Aborting the last request."
	msgContentType = "Unsupported Media Type: Only 'application/json' is allowed"
)

func errBody(status int, typ, msg string) []byte {
	return marshal(errorBody{Object: "error", Message: msg, Type: typ, Code: status})
}

func (s *server) writeError(w http.ResponseWriter, status int, typ, msg string) {
	switch {
	case status == http.StatusBadRequest:
		s.n400.Add(1)
	case status >= 500 && status != http.StatusServiceUnavailable:
		s.n500.Add(1)
	}
	writeJSON(w, status, errBody(status, typ, msg))
}

func jsonContentType(r *http.Request) bool {
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	return err == nil && mt == "application/json"
}

// reply carries what a response needs besides the engine's result.
type reply struct {
	id           string
	model        string
	created      int64
	chat         bool
	thinking     bool
	separate     bool
	prompt       int
	reasoning    int // reasoning tokens of the plan
	includeUsage bool
	continuous   bool
	drop         bool
}

// split divides generated tokens into reasoning and content tokens.
func (rp *reply) split(gen int) (reasoning, content int) {
	if !rp.thinking {
		return 0, gen
	}
	reasoning = min(gen, rp.reasoning)
	return reasoning, gen - reasoning
}

func (rp *reply) usage(gen int) usageInfo {
	r, _ := rp.split(gen)
	return usageInfo{PromptTokens: rp.prompt, CompletionTokens: gen, TotalTokens: rp.prompt + gen, ReasoningTokens: r}
}

func (rp *reply) matched(finish string) *int {
	if finish != "stop" {
		return nil
	}
	t := imEndToken
	if !rp.chat {
		t = endOfTextToken
	}
	return &t
}

const thinkEnd = "\n</think>\n\n"

// body builds a non-streaming response for gen generated tokens.
func (s *server) body(rp *reply, gen int, finish string) []byte {
	rTok, cTok := rp.split(gen)
	cp := s.p.contentCap
	fill := s.f.fill
	content := fill.text(false, 0, cTok, cp)
	resp := response{ID: rp.id, Created: rp.created, Model: rp.model, Usage: rp.usage(gen),
		Metadata: map[string]string{"weight_version": "default"}}
	ch := respChoice{FinishReason: finish, MatchedStop: rp.matched(finish)}
	if rp.chat {
		resp.Object = "chat.completion"
		msg := &respMessage{Role: "assistant", Content: content}
		if rTok > 0 {
			rs := fill.text(true, 0, rTok, cp)
			if rp.separate {
				msg.ReasoningContent = &rs
			} else {
				msg.Content = rs + thinkEnd + content
			}
		}
		ch.Message = msg
	} else {
		resp.Object = "text_completion"
		ch.Text = &content
	}
	resp.Choices = []respChoice{ch}
	return marshal(resp)
}

// generate serves /v1/chat/completions (chat) and /v1/completions.
func (s *server) generate(w http.ResponseWriter, hr *http.Request, chat bool) {
	if !jsonContentType(hr) {
		s.writeError(w, http.StatusBadRequest, typeValidation, msgContentType)
		return
	}
	raw, err := io.ReadAll(io.LimitReader(hr.Body, maxBodyBytes))
	if err != nil {
		return // client gone
	}
	var g genRequest
	if err := json.Unmarshal(raw, &g); err != nil {
		s.writeError(w, http.StatusBadRequest, typeValidation, "JSON decode error: "+err.Error())
		return
	}
	text, nPrompt, err := g.promptText(chat)
	if err != nil {
		s.writeError(w, http.StatusBadRequest, typeBadRequest, err.Error())
		return
	}
	maxTok := g.MaxCompletionTokens
	if maxTok == nil {
		maxTok = g.MaxTokens
	}
	if maxTok == nil && !chat {
		def := 16
		maxTok = &def
	}
	ctxLen := s.p.contextLen
	switch {
	case maxTok != nil && *maxTok < 0:
		s.writeError(w, http.StatusBadRequest, typeBadRequest, fmt.Sprintf("max_new_tokens must be at least 0, got %d.", *maxTok))
		return
	case s.p.contextSet && maxTok != nil && *maxTok > ctxLen:
		s.writeError(w, http.StatusBadRequest, typeBadRequest, fmt.Sprintf("max_completion_tokens is too large: %d.This model supports at most %d completion tokens.", *maxTok, ctxLen))
		return
	case nPrompt >= ctxLen:
		s.writeError(w, http.StatusBadRequest, typeBadRequest, fmt.Sprintf("The input (%d tokens) is longer than the model's context length (%d tokens).", nPrompt, ctxLen))
		return
	case maxTok != nil && nPrompt+*maxTok >= ctxLen:
		s.writeError(w, http.StatusBadRequest, typeBadRequest, fmt.Sprintf("Requested token count exceeds the model's maximum context length of %d tokens. You requested a total of %d tokens: %d tokens from the input messages and %d tokens for the completion. Please reduce the number of tokens in the input messages or the completion to fit within the limit.", ctxLen, nPrompt+*maxTok, nPrompt, *maxTok))
		return
	}
	thinking := chat && g.thinking()
	rp := &reply{
		model: g.Model, created: time.Now().Unix(), chat: chat, thinking: thinking,
		separate: g.SeparateReasoning == nil || *g.SeparateReasoning, prompt: nPrompt,
	}
	if g.StreamOptions != nil {
		rp.includeUsage = g.StreamOptions.IncludeUsage
		rp.continuous = g.StreamOptions.ContinuousUsageStats
	}
	seq := s.seq.Add(1)
	rp.id = g.rid()
	if rp.id == "" {
		rp.id = s.newID(seq)
	}
	if nPrompt >= s.p.maxReqInputLen {
		msg := fmt.Sprintf("Input length (%d tokens) exceeds the maximum allowed length (%d tokens). Use a shorter input or enable --allow-auto-truncate.", nPrompt, s.p.maxReqInputLen)
		if g.Stream {
			s.n400.Add(1)
			s.streamError(w, rp, http.StatusBadRequest, typeBadRequest, msg)
			return
		}
		s.writeError(w, http.StatusBadRequest, typeBadRequest, msg)
		return
	}
	if s.draw(seq, 1) < s.cfg.Faults.ErrorRate {
		s.writeError(w, http.StatusInternalServerError, typeInternal, "Internal server error: simulated fault (gensim error_rate)")
		return
	}
	rp.drop = s.draw(seq, 2) < s.cfg.Faults.DropRate

	r := newRequest()
	if !s.register(rp.id, r) {
		s.writeError(w, http.StatusBadRequest, typeBadRequest, "Duplicate request ID detected: "+rp.id)
		return
	}
	defer s.unregister(rp.id)

	maxNew := 1 << 30
	if maxTok != nil {
		maxNew = *maxTok
	}
	maxNew = min(maxNew, s.p.maxReqLen-nPrompt-1)
	plan := s.p.lengths.plan(text, thinking)
	if maxNew <= 0 {
		s.nNoEng.Add(1)
		if g.Stream {
			s.stream(w, hr, rp, nil)
			return
		}
		writeJSON(w, http.StatusOK, s.body(rp, 0, "length"))
		return
	}
	r.id, r.prompt, r.maxNew, r.stream = rp.id, nPrompt, maxNew, g.Stream
	r.target, r.reason = plan.total, "stop"
	if plan.total >= maxNew {
		r.target, r.reason = maxNew, "length"
	}
	rp.reasoning = plan.reasoning
	s.eng.submit(r)
	if g.Stream {
		s.stream(w, hr, rp, r)
		return
	}
	select {
	case <-r.done:
	case <-hr.Context().Done():
		s.eng.abort(r)
		return
	}
	switch r.out {
	case outQueueFull:
		s.writeError(w, http.StatusServiceUnavailable, typeQueueFull, msgQueueFull)
		return
	case outOOM:
		s.writeError(w, http.StatusInternalServerError, typeInternal, msgOOM)
		return
	case outDied:
		return // the connection is closed with the server
	}
	body := s.body(rp, r.generated, r.finish)
	if rp.drop {
		s.dropAfter(w, body)
		return
	}
	writeJSON(w, http.StatusOK, body)
}

// dropAfter sends the headers and half the body, then closes the connection.
func (s *server) dropAfter(w http.ResponseWriter, body []byte) {
	s.nDrop.Add(1)
	conn, buf, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return
	}
	defer func() { _ = conn.Close() }()
	_, _ = fmt.Fprintf(buf, "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", len(body))
	_, _ = buf.Write(body[:len(body)/2])
	_ = buf.Flush()
}

// sse writes server-sent events and flushes once per batch.
type sse struct {
	w   http.ResponseWriter
	rc  *http.ResponseController
	buf []byte
	err error
}

func (e *sse) event(v any) {
	e.buf = append(e.buf, "data: "...)
	e.buf = append(e.buf, marshal(v)...)
	e.buf = append(e.buf, "\n\n"...)
}

func (e *sse) raw(s string) { e.buf = append(e.buf, s...) }

func (e *sse) flush() error {
	if e.err != nil || len(e.buf) == 0 {
		return e.err
	}
	if _, err := e.w.Write(e.buf); err != nil {
		e.err = err
		return err
	}
	e.buf = e.buf[:0]
	e.err = e.rc.Flush()
	return e.err
}

func startSSE(w http.ResponseWriter) *sse {
	w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	return &sse{w: w, rc: http.NewResponseController(w)}
}

// streamError is an error that SGLang reports inside a 200 stream.
func (s *server) streamError(w http.ResponseWriter, rp *reply, status int, typ, msg string) {
	e := startSSE(w)
	e.raw(`data: {"error":`)
	e.buf = append(e.buf, errBody(status, typ, msg)...)
	e.raw("}\n\n")
	if rp.includeUsage {
		u := rp.usage(0)
		e.event(rp.chunk(nil, &u))
	}
	e.raw("data: [DONE]\n\n")
	_ = e.flush() // the client may be gone
}

func (rp *reply) chunk(choices []chunkChoice, u *usageInfo) chunk {
	obj := "chat.completion.chunk"
	if !rp.chat {
		obj = "text_completion"
	}
	if choices == nil {
		choices = []chunkChoice{}
	}
	return chunk{ID: rp.id, Object: obj, Created: rp.created, Model: rp.model, Choices: choices, Usage: u}
}

func strp(s string) *string { return &s }

// stream serves an SSE response: headers once the first token exists (after
// queueing and prefill), one chunk per field per engine tick, then the finish
// chunk, the usage chunk and [DONE]. A nil r is a zero-token request.
func (s *server) stream(w http.ResponseWriter, hr *http.Request, rp *reply, r *request) {
	ctx := hr.Context()
	if r != nil {
		select {
		case <-r.notify:
		case <-r.done:
		case <-ctx.Done():
			s.eng.abort(r)
			return
		}
		if isDone(r) {
			switch r.out {
			case outQueueFull:
				s.streamError(w, rp, http.StatusServiceUnavailable, typeQueueStream, msgQueueFull)
				return
			case outOOM:
				s.n500.Add(1)
				s.streamError(w, rp, http.StatusInternalServerError, typeInternal, msgOOM)
				return
			case outDied:
				return
			}
		}
	}
	e := startSSE(w)
	if rp.chat {
		e.event(rp.chunk([]chunkChoice{{Delta: &delta{Role: "assistant", Content: strp("")}}}, nil))
	}
	sent := 0
	cap := s.p.contentCap
	emit := func(gen int, finish *string) {
		rFrom, cFrom := rp.split(sent)
		rTo, cTo := rp.split(gen)
		var u *usageInfo
		if rp.continuous {
			x := rp.usage(gen)
			u = &x
		}
		events := len(e.buf)
		if rp.chat {
			if t := s.f.fill.text(true, rFrom, rTo, cap); t != "" {
				if rp.separate {
					e.event(rp.chunk([]chunkChoice{{Delta: &delta{ReasoningContent: &t}}}, u))
				} else {
					e.event(rp.chunk([]chunkChoice{{Delta: &delta{Content: &t}}}, u))
				}
			}
			t := s.f.fill.text(false, cFrom, cTo, cap)
			if !rp.separate && rFrom+cFrom > 0 && cFrom == 0 && cTo > 0 {
				t = thinkEnd + t
			}
			if t != "" {
				e.event(rp.chunk([]chunkChoice{{Delta: &delta{Content: &t}}}, u))
			}
		} else if t := s.f.fill.text(false, cFrom, cTo, cap); t != "" || finish != nil {
			e.event(rp.chunk([]chunkChoice{{Text: &t, FinishReason: finish, MatchedStop: rp.matched(deref(finish))}}, u))
		}
		// A real server sends every token; past the text cap (a
		// simulation shortcut) the tokens still count: with continuous
		// usage, an empty delta carries them, so a client's progress
		// does not stall at the cap.
		if u != nil && gen > sent && len(e.buf) == events {
			empty := ""
			if rp.chat {
				e.event(rp.chunk([]chunkChoice{{Delta: &delta{Content: &empty}}}, u))
			} else {
				e.event(rp.chunk([]chunkChoice{{Text: &empty}}, u))
			}
		}
		sent = gen
	}
	finish, gen := "length", 0
	for r != nil {
		if isDone(r) {
			if r.out != outFinished {
				return // died: the connection is gone
			}
			finish, gen = r.finish, r.generated
			break
		}
		emit(int(r.progress.Load()), nil)
		if e.flush() != nil {
			s.eng.abort(r)
			return
		}
		select {
		case <-r.notify:
		case <-r.done:
		case <-ctx.Done():
			s.eng.abort(r)
			return
		}
	}
	if rp.chat {
		emit(gen, nil)
	} else {
		emit(gen, &finish)
	}
	if rp.drop {
		_ = e.flush()
		s.nDrop.Add(1)
		if conn, _, err := e.rc.Hijack(); err == nil {
			_ = conn.Close()
		}
		return
	}
	if rp.chat {
		e.event(rp.chunk([]chunkChoice{{Delta: &delta{}, FinishReason: &finish, MatchedStop: rp.matched(finish)}}, nil))
	}
	if rp.includeUsage {
		u := rp.usage(gen)
		e.event(rp.chunk(nil, &u))
	}
	e.raw("data: [DONE]\n\n")
	_ = e.flush() // the client may be gone
}

func isDone(r *request) bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
