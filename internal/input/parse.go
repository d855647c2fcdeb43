package input

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
)

// Endpoints an item can be sent to.
const (
	EndpointChat        = "/v1/chat/completions"
	EndpointCompletions = "/v1/completions"
)

// BadLine codes.
const (
	CodeInvalidInput = "invalid_input"
	CodeDuplicateID  = "duplicate_custom_id"
)

// passField reports whether a top-level key of a chat or completion line is
// a request field that goes into the body. Everything else on such a line
// (dataset metadata such as "source", "category", a generator's "model") is
// ignored: servers would ignore most of it, but some (vLLM's "priority",
// "model") change or break the request. Lines in the OpenAI Batch form are
// not filtered: their "body" is a request by definition.
func passField(k string) bool {
	switch k {
	case "max_tokens", "max_completion_tokens",
		"temperature", "top_p", "top_k", "min_p", "seed", "n", "stop",
		"frequency_penalty", "presence_penalty", "repetition_penalty", "length_penalty",
		"logit_bias", "logprobs", "top_logprobs", "min_tokens", "stop_token_ids",
		"ignore_eos", "skip_special_tokens", "spaces_between_special_tokens",
		"include_stop_str_in_output", "no_stop_trim",
		"response_format", "tools", "tool_choice", "parallel_tool_calls",
		"reasoning_effort", "chat_template_kwargs", "separate_reasoning",
		"continue_final_message", "add_generation_prompt", "chat_template", "documents",
		"regex", "ebnf", "json_schema", "structured_outputs",
		"guided_json", "guided_regex", "guided_choice", "guided_grammar",
		"best_of", "echo", "suffix", "user", "lora_path":
		return true
	}
	return false
}

// dropField reports keys never sent from the input or the params: the
// backend owns streaming and the request id.
func dropField(k string) bool {
	switch k {
	case "stream", "stream_options", "rid", "request_id":
		return true
	}
	return false
}

// parser turns one input line into a request body. It keeps scratch
// buffers between lines; it is not safe for concurrent use.
type parser struct {
	endpoint string
	model    []byte   // JSON-encoded request.model; nil = leave out
	params   []member // encoded params, sorted by key, without dropped keys and limits
	pMT      []byte   // params.max_tokens (raw JSON) or nil
	pMCT     []byte   // params.max_completion_tokens (raw JSON) or nil

	v     validator
	ms    []member // members of the line
	bms   []member // members of a batch line's body
	mm    []member // members of one message
	buf   []byte   // body being built
	idBuf []byte
	conv  []byte // ShareGPT conversations converted to messages
}

func newParser(opts Options) (*parser, error) {
	p := &parser{endpoint: opts.Endpoint}
	if p.endpoint == "" {
		p.endpoint = EndpointChat
	}
	if p.endpoint != EndpointChat && p.endpoint != EndpointCompletions {
		return nil, fmt.Errorf("endpoint %q: must be %s or %s", opts.Endpoint, EndpointChat, EndpointCompletions)
	}
	if opts.Model != "" {
		b, err := json.Marshal(opts.Model)
		if err != nil {
			return nil, fmt.Errorf("encode model: %w", err)
		}
		p.model = b
	}
	for k, v := range opts.Params {
		if dropField(k) || (k == "model" && p.model != nil) {
			continue
		}
		raw, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("encode params.%s: %w", k, err)
		}
		switch k {
		case "max_tokens", "max_completion_tokens":
			if isNull(raw) {
				continue
			}
			if _, ok := parseLimit(raw); !ok {
				return nil, fmt.Errorf("params.%s: must be a positive integer, got %s", k, raw)
			}
			if k == "max_tokens" {
				p.pMT = raw
			} else {
				p.pMCT = raw
			}
			continue
		}
		rk, err := json.Marshal(k)
		if err != nil {
			return nil, fmt.Errorf("encode params key %q: %w", k, err)
		}
		p.params = append(p.params, member{key: []byte(k), raw: rk, val: raw})
	}
	slices.SortFunc(p.params, func(a, b member) int { return bytes.Compare(a.key, b.key) })
	return p, nil
}

// parseLimit reads a token limit: a positive integer that fits in an int32.
func parseLimit(v []byte) (int, bool) {
	if len(v) == 0 || (v[0] != '-' && (v[0] < '0' || v[0] > '9')) {
		return 0, false
	}
	f, err := strconv.ParseFloat(string(v), 64)
	if err != nil || f != math.Trunc(f) || f < 1 || f > math.MaxInt32 {
		return 0, false
	}
	return int(f), true
}

// split checks that line is one JSON object and splits its members into
// p.ms. It returns a reason when the line is not usable at all.
func (p *parser) split(line []byte) string {
	p.ms = p.ms[:0]
	if !p.v.valid(line) {
		var v any
		if err := json.Unmarshal(line, &v); err != nil {
			return "invalid JSON: " + err.Error()
		}
		return "invalid JSON"
	}
	if line[0] != '{' {
		return "a line must be a JSON object, got " + kind(line)
	}
	p.ms = appendMembers(p.ms, line)
	return ""
}

// readID reads custom_id (or id) from p.ms into p.idBuf. Numbers become
// their decimal string. It returns nil and a reason when there is no usable id.
func (p *parser) readID() ([]byte, string) {
	field := "custom_id"
	v := lookup(p.ms, field)
	if v == nil {
		field = "id"
		v = lookup(p.ms, field)
	}
	if v == nil {
		return nil, `missing "custom_id" (or "id")`
	}
	switch {
	case v[0] == '"':
		p.idBuf = appendUnquoted(p.idBuf[:0], v)
		if len(p.idBuf) == 0 {
			return nil, fmt.Sprintf("%q must not be empty", field)
		}
		return p.idBuf, ""
	case v[0] == '-' || (v[0] >= '0' && v[0] <= '9'):
		if bytes.IndexAny(v, ".eE") < 0 {
			p.idBuf = append(p.idBuf[:0], v...)
			return p.idBuf, ""
		}
		f, err := strconv.ParseFloat(string(v), 64)
		if err == nil && f == math.Trunc(f) && math.Abs(f) <= 1<<53 {
			p.idBuf = strconv.AppendInt(p.idBuf[:0], int64(f), 10)
			return p.idBuf, ""
		}
		return nil, fmt.Sprintf("%q must be a string or an integer, got %s", field, v)
	default:
		return nil, fmt.Sprintf("%q must be a string or an integer, got %s", field, kind(v))
	}
}

// parseLine parses one line on its own (no duplicate detection): exactly
// one of the results is set.
func (p *parser) parseLine(line []byte, lineNo int64) (Item, *BadLine) {
	line = trimSpace(line)
	msg := p.split(line)
	var id []byte
	if msg == "" {
		id, msg = p.readID()
	}
	if msg != "" {
		return Item{}, badLine(lineNo, id, CodeInvalidInput, msg)
	}
	it, msg := p.build(id)
	if msg != "" {
		return Item{}, badLine(lineNo, id, CodeInvalidInput, msg)
	}
	it.Line = lineNo
	return it, nil
}

func badLine(lineNo int64, id []byte, code, msg string) *BadLine {
	return &BadLine{Line: lineNo, CustomID: string(id), Code: code, Message: fmt.Sprintf("line %d: %s", lineNo, msg)}
}

// build makes the request body from p.ms (already split, id read). It
// returns a reason when the line is not a valid request.
func (p *parser) build(id []byte) (Item, string) {
	it := Item{Endpoint: p.endpoint}
	src := p.ms // where request fields come from
	batch := false
	prefix := ""
	var payload []byte // messages or prompt, raw JSON
	payloadKey := "messages"

	if body := lookup(p.ms, "body"); body != nil {
		batch, prefix = true, "body."
		if m := lookup(p.ms, "method"); m != nil {
			if m[0] != '"' || !bytes.EqualFold(m, []byte(`"POST"`)) {
				return it, fmt.Sprintf(`"method" must be "POST", got %s`, clip(m))
			}
		}
		if u := lookup(p.ms, "url"); u != nil {
			switch string(u) {
			case `"` + EndpointChat + `"`:
				it.Endpoint = EndpointChat
			case `"` + EndpointCompletions + `"`:
				it.Endpoint = EndpointCompletions
			default:
				return it, fmt.Sprintf(`"url" must be %q or %q, got %s`, EndpointChat, EndpointCompletions, clip(u))
			}
		}
		if body[0] != '{' {
			return it, fmt.Sprintf(`"body" must be an object, got %s`, kind(body))
		}
		p.bms = appendMembers(p.bms[:0], body)
		src = p.bms
	}

	if it.Endpoint == EndpointChat {
		switch {
		case lookup(src, "messages") != nil:
			n, msg := p.checkMessages(lookup(src, "messages"), prefix+"messages")
			if msg != "" {
				return it, msg
			}
			payload, it.PromptBytes = lookup(src, "messages"), n
		case !batch && lookup(src, "conversations") != nil:
			n, msg := p.convertShareGPT(lookup(src, "conversations"))
			if msg != "" {
				return it, msg
			}
			payload, it.PromptBytes = p.conv, n
		case lookup(src, "prompt") != nil:
			return it, fmt.Sprintf("%q needs endpoint %s, but this line's endpoint is %s", prefix+"prompt", EndpointCompletions, it.Endpoint)
		default:
			if batch {
				return it, `missing "body.messages"`
			}
			return it, `missing "messages" (or "conversations", or "prompt" for /v1/completions)`
		}
	} else {
		payloadKey = "prompt"
		switch {
		case lookup(src, "prompt") != nil:
			n, msg := checkPrompt(lookup(src, "prompt"), prefix+"prompt")
			if msg != "" {
				return it, msg
			}
			payload, it.PromptBytes = lookup(src, "prompt"), n
		case lookup(src, "messages") != nil || (!batch && lookup(src, "conversations") != nil):
			k := "messages"
			if lookup(src, k) == nil {
				k = "conversations"
			}
			return it, fmt.Sprintf("%q needs endpoint %s, but this line's endpoint is %s", prefix+k, EndpointChat, it.Endpoint)
		default:
			return it, fmt.Sprintf("missing %q", prefix+"prompt")
		}
	}

	// Token limits: the line's own limit wins over the job's; within one
	// level the endpoint's primary field wins.
	primary, secondary := "max_completion_tokens", "max_tokens"
	if it.Endpoint == EndpointCompletions {
		primary, secondary = "max_tokens", "max_completion_tokens"
	}
	pPrimary, pSecondary := p.pMCT, p.pMT
	if it.Endpoint == EndpointCompletions {
		pPrimary, pSecondary = p.pMT, p.pMCT
	}
	limit := pPrimary
	if limit == nil {
		limit = pSecondary
	}
	haveSecondary := pSecondary != nil
	for _, k := range [...]string{secondary, primary} { // primary last: it wins
		if v := lookup(src, k); v != nil {
			if _, ok := parseLimit(v); !ok {
				return it, fmt.Sprintf("%q must be a positive integer, got %s", prefix+k, clip(v))
			}
			if k == secondary {
				haveSecondary = true
			}
			limit = v
		}
	}
	if limit != nil {
		it.MaxTokens, _ = parseLimit(limit)
	}

	b := append(p.buf[:0], '{')
	add := func(rawKey, val []byte) {
		if len(b) > 1 {
			b = append(b, ',')
		}
		b = append(b, rawKey...)
		b = append(b, ':')
		b = append(b, val...)
	}
	wroteModel := true
	switch {
	case p.model != nil:
		add([]byte(`"model"`), p.model)
	case batch && lookup(src, "model") != nil:
		add([]byte(`"model"`), lookup(src, "model"))
	default:
		wroteModel = false
	}
	add([]byte(`"`+payloadKey+`"`), payload)
	keep := func(k []byte, v []byte) bool {
		ks := string(k)
		switch ks {
		case "model", "messages", "prompt", "conversations", "max_tokens", "max_completion_tokens":
			return false
		}
		if isNull(v) || dropField(ks) {
			return false
		}
		return batch || passField(ks)
	}
	for _, m := range src {
		if keep(m.key, m.val) {
			add(m.raw, m.val)
		}
	}
	for _, m := range p.params {
		if string(m.key) == payloadKey || (string(m.key) == "model" && wroteModel) {
			continue
		}
		if v := lookupMember(src, m.key); v != nil && keep(m.key, v) {
			continue // the line overrides it
		}
		add(m.raw, m.val)
	}
	if limit != nil {
		add([]byte(`"`+primary+`"`), limit)
		if haveSecondary {
			add([]byte(`"`+secondary+`"`), limit)
		}
	}
	b = append(b, '}')
	p.buf = b
	it.CustomID = string(id)
	it.Body = bytes.Clone(b)
	return it, ""
}

func lookupMember(ms []member, key []byte) []byte {
	for _, m := range ms {
		if bytes.Equal(m.key, key) {
			return m.val
		}
	}
	return nil
}

// clip shortens a raw value for an error message (never a whole prompt).
func clip(v []byte) string {
	const n = 40
	if len(v) <= n {
		return string(v)
	}
	return string(v[:n]) + "..."
}

// checkMessages validates a chat "messages" array and returns its prompt
// bytes: the lengths of the string contents (and of "text" in content
// parts), as written in JSON.
func (p *parser) checkMessages(v []byte, field string) (int, string) {
	if v[0] != '[' {
		return 0, fmt.Sprintf("%q must be an array, got %s", field, kind(v))
	}
	total, count := 0, 0
	var msg string
	forEachElement(v, func(i int, e []byte) bool {
		count++
		if e[0] != '{' {
			msg = fmt.Sprintf("%q must be an object, got %s", fmt.Sprintf("%s[%d]", field, i), kind(e))
			return false
		}
		p.mm = appendMembers(p.mm[:0], e)
		if r := lookup(p.mm, "role"); r == nil || r[0] != '"' {
			msg = fmt.Sprintf("%q must be a string", fmt.Sprintf("%s[%d].role", field, i))
			return false
		}
		c := lookup(p.mm, "content")
		switch {
		case c == nil:
		case c[0] == '"':
			total += len(c) - 2
		case c[0] == '[':
			forEachElement(c, func(_ int, part []byte) bool {
				if part[0] == '{' {
					p.mm = appendMembers(p.mm[:0], part)
					if t := lookup(p.mm, "text"); t != nil && t[0] == '"' {
						total += len(t) - 2
					}
				}
				return true
			})
		default:
			msg = fmt.Sprintf("%q must be a string or an array, got %s", fmt.Sprintf("%s[%d].content", field, i), kind(c))
			return false
		}
		return true
	})
	if msg != "" {
		return 0, msg
	}
	if count == 0 {
		return 0, fmt.Sprintf("%q must not be empty", field)
	}
	return total, ""
}

// checkPrompt validates a completion "prompt": a non-empty string, a
// non-empty array of strings, or a non-empty array of token ids (counted
// as 4 bytes each for the prompt-size estimate).
func checkPrompt(v []byte, field string) (int, string) {
	bad := fmt.Sprintf("%q must be a string, an array of strings or an array of token ids, got %s", field, kind(v))
	switch v[0] {
	case '"':
		if len(v) == 2 {
			return 0, fmt.Sprintf("%q must not be empty", field)
		}
		return len(v) - 2, ""
	case '[':
		total, count := 0, 0
		var strs, nums bool
		ok := true
		forEachElement(v, func(_ int, e []byte) bool {
			count++
			switch {
			case e[0] == '"':
				strs = true
				total += len(e) - 2
			case e[0] == '-' || (e[0] >= '0' && e[0] <= '9'):
				nums = true
				total += 4
			default:
				ok = false
			}
			return ok && !(strs && nums)
		})
		if !ok || (strs && nums) {
			return 0, bad
		}
		if count == 0 || total == 0 {
			return 0, fmt.Sprintf("%q must not be empty", field)
		}
		return total, ""
	default:
		return 0, bad
	}
}

// shareGPTRole maps a ShareGPT "from" to a chat role.
func shareGPTRole(from string) string {
	switch from {
	case "human", "user":
		return "user"
	case "gpt", "assistant", "chatgpt", "bing", "bard", "model":
		return "assistant"
	case "system":
		return "system"
	}
	return ""
}

// convertShareGPT turns "conversations" into chat messages in p.conv,
// dropping trailing assistant turns so that the model generates them.
func (p *parser) convertShareGPT(v []byte) (int, string) {
	const field = "conversations"
	if v[0] != '[' {
		return 0, fmt.Sprintf("%q must be an array, got %s", field, kind(v))
	}
	type turn struct {
		role  string
		value []byte
	}
	var turns []turn
	var msg string
	forEachElement(v, func(i int, e []byte) bool {
		if e[0] != '{' {
			msg = fmt.Sprintf("%q must be an object, got %s", fmt.Sprintf("%s[%d]", field, i), kind(e))
			return false
		}
		p.mm = appendMembers(p.mm[:0], e)
		from := lookup(p.mm, "from")
		if from == nil || from[0] != '"' {
			msg = fmt.Sprintf("%q must be a string", fmt.Sprintf("%s[%d].from", field, i))
			return false
		}
		role := shareGPTRole(string(appendUnquoted(nil, from)))
		if role == "" {
			msg = fmt.Sprintf("%q must be human, user, gpt, assistant or system, got %s", fmt.Sprintf("%s[%d].from", field, i), clip(from))
			return false
		}
		val := lookup(p.mm, "value")
		if val == nil || val[0] != '"' {
			msg = fmt.Sprintf("%q must be a string", fmt.Sprintf("%s[%d].value", field, i))
			return false
		}
		turns = append(turns, turn{role: role, value: val})
		return true
	})
	if msg != "" {
		return 0, msg
	}
	for len(turns) > 0 && turns[len(turns)-1].role == "assistant" {
		turns = turns[:len(turns)-1]
	}
	if !slices.ContainsFunc(turns, func(t turn) bool { return t.role == "user" }) {
		return 0, fmt.Sprintf("%q has no human turn to answer", field)
	}
	total := 0
	b := append(p.conv[:0], '[')
	for i, t := range turns {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, `{"role":"`...)
		b = append(b, t.role...)
		b = append(b, `","content":`...)
		b = append(b, t.value...)
		b = append(b, '}')
		total += len(t.value) - 2
	}
	p.conv = append(b, ']')
	return total, ""
}
