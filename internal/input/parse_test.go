package input

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

func mustParser(t testing.TB, opts Options) *parser {
	t.Helper()
	p, err := newParser(opts)
	if err != nil {
		t.Fatalf("newParser: %v", err)
	}
	return p
}

func decode(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		t.Fatalf("body %s is not a JSON object: %v", b, err)
	}
	return m
}

func jsonMap(t *testing.T, s string) map[string]any {
	t.Helper()
	return decode(t, []byte(s))
}

var jobParams = map[string]any{
	"temperature":          0.6,
	"max_tokens":           100,
	"chat_template_kwargs": map[string]any{"enable_thinking": true},
	"stream":               true, // never sent
}

func TestParseLineForms(t *testing.T) {
	t.Parallel()
	const user = `[{"role":"user","content":"hi"}]`
	tests := []struct {
		name     string
		opts     Options
		line     string
		id       string
		endpoint string
		body     string
		maxTok   int
		prompt   int
	}{
		{
			name: "chat with extra fields", line: `{"custom_id":"a","messages":` + user + `,"temperature":0.2,"source":"x","model":"gpt-4","stream":true}`,
			id: "a", endpoint: EndpointChat, maxTok: 100, prompt: 2,
			body: `{"model":"m","messages":` + user + `,"temperature":0.2,"chat_template_kwargs":{"enable_thinking":true},"max_completion_tokens":100,"max_tokens":100}`,
		},
		{
			name: "chat numeric id", line: `{"id":12,"messages":` + user + `}`,
			id: "12", endpoint: EndpointChat, maxTok: 100, prompt: 2,
			body: `{"model":"m","messages":` + user + `,"temperature":0.6,"chat_template_kwargs":{"enable_thinking":true},"max_completion_tokens":100,"max_tokens":100}`,
		},
		{
			name: "chat integral float id", line: `{"id":12.0,"messages":` + user + `}`,
			id: "12", endpoint: EndpointChat, maxTok: 100, prompt: 2,
			body: `{"model":"m","messages":` + user + `,"temperature":0.6,"chat_template_kwargs":{"enable_thinking":true},"max_completion_tokens":100,"max_tokens":100}`,
		},
		{
			name: "custom_id wins over id and null falls back to params", line: `{"custom_id":"c","id":"i","messages":` + user + `,"temperature":null}`,
			id: "c", endpoint: EndpointChat, maxTok: 100, prompt: 2,
			body: `{"model":"m","messages":` + user + `,"temperature":0.6,"chat_template_kwargs":{"enable_thinking":true},"max_completion_tokens":100,"max_tokens":100}`,
		},
		{
			name: "line limit wins over params", line: `{"id":"x","messages":` + user + `,"max_completion_tokens":7}`,
			id: "x", endpoint: EndpointChat, maxTok: 7, prompt: 2,
			body: `{"model":"m","messages":` + user + `,"temperature":0.6,"chat_template_kwargs":{"enable_thinking":true},"max_completion_tokens":7,"max_tokens":7}`,
		},
		{
			name: "content parts", line: `{"id":"x","messages":[{"role":"user","content":[{"type":"text","text":"abcd"},{"type":"image_url","image_url":{"url":"u"}}]}]}`,
			id: "x", endpoint: EndpointChat, maxTok: 100, prompt: 4,
			body: `{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"abcd"},{"type":"image_url","image_url":{"url":"u"}}]}],"temperature":0.6,"chat_template_kwargs":{"enable_thinking":true},"max_completion_tokens":100,"max_tokens":100}`,
		},
		{
			name: "openai batch", line: `{"custom_id":"b","method":"POST","url":"/v1/chat/completions","body":{"model":"gpt","messages":` + user + `,"max_tokens":5,"stream":true,"stream_options":{"include_usage":true},"top_k":3}}`,
			id: "b", endpoint: EndpointChat, maxTok: 5, prompt: 2,
			body: `{"model":"m","messages":` + user + `,"top_k":3,"temperature":0.6,"chat_template_kwargs":{"enable_thinking":true},"max_completion_tokens":5,"max_tokens":5}`,
		},
		{
			name: "openai batch keeps body model without request.model", opts: Options{Params: map[string]any{"seed": 1}},
			line: `{"custom_id":"b","method":"post","body":{"model":"gpt","messages":` + user + `}}`,
			id:   "b", endpoint: EndpointChat, prompt: 2,
			body: `{"model":"gpt","messages":` + user + `,"seed":1}`,
		},
		{
			name: "openai batch body model wins over params model", opts: Options{Params: map[string]any{"model": "pm"}},
			line: `{"custom_id":"b","body":{"model":"gpt","messages":` + user + `}}`,
			id:   "b", endpoint: EndpointChat, prompt: 2,
			body: `{"model":"gpt","messages":` + user + `}`,
		},
		{
			name: "params model on a chat line", opts: Options{Params: map[string]any{"model": "pm"}},
			line: `{"id":"c","model":"dataset-model","messages":` + user + `}`,
			id:   "c", endpoint: EndpointChat, prompt: 2,
			body: `{"model":"pm","messages":` + user + `}`,
		},
		{
			name: "openai batch url picks completions", line: `{"custom_id":"c","url":"/v1/completions","body":{"prompt":"abc"}}`,
			id: "c", endpoint: EndpointCompletions, maxTok: 100, prompt: 3,
			body: `{"model":"m","prompt":"abc","temperature":0.6,"chat_template_kwargs":{"enable_thinking":true},"max_tokens":100}`,
		},
		{
			name: "sharegpt drops trailing assistant", line: `{"id":"s","conversations":[{"from":"system","value":"sys"},{"from":"human","value":"q"},{"from":"gpt","value":"a"}]}`,
			id: "s", endpoint: EndpointChat, maxTok: 100, prompt: 4,
			body: `{"model":"m","messages":[{"role":"system","content":"sys"},{"role":"user","content":"q"}],"temperature":0.6,"chat_template_kwargs":{"enable_thinking":true},"max_completion_tokens":100,"max_tokens":100}`,
		},
		{
			name: "sharegpt multi turn", line: `{"id":"s","conversations":[{"from":"human","value":"q1"},{"from":"gpt","value":"a1"},{"from":"user","value":"q2"}]}`,
			id: "s", endpoint: EndpointChat, maxTok: 100, prompt: 6,
			body: `{"model":"m","messages":[{"role":"user","content":"q1"},{"role":"assistant","content":"a1"},{"role":"user","content":"q2"}],"temperature":0.6,"chat_template_kwargs":{"enable_thinking":true},"max_completion_tokens":100,"max_tokens":100}`,
		},
		{
			name: "completion", opts: Options{Endpoint: EndpointCompletions, Model: "m", Params: jobParams},
			line: `{"id":"p","prompt":"hello","max_completion_tokens":9}`,
			id:   "p", endpoint: EndpointCompletions, maxTok: 9, prompt: 5,
			body: `{"model":"m","prompt":"hello","temperature":0.6,"chat_template_kwargs":{"enable_thinking":true},"max_tokens":9,"max_completion_tokens":9}`,
		},
		{
			name: "completion token ids", opts: Options{Endpoint: EndpointCompletions},
			line: `{"id":"p","prompt":[1,2,3]}`,
			id:   "p", endpoint: EndpointCompletions, prompt: 12,
			body: `{"prompt":[1,2,3]}`,
		},
		{
			name: "escaped key", line: `{"custom\u005fid":"e","messages":` + user + `}`,
			id: "e", endpoint: EndpointChat, maxTok: 100, prompt: 2,
			body: `{"model":"m","messages":` + user + `,"temperature":0.6,"chat_template_kwargs":{"enable_thinking":true},"max_completion_tokens":100,"max_tokens":100}`,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			opts := tc.opts
			if opts.Endpoint == "" && opts.Params == nil {
				opts = Options{Model: "m", Params: jobParams}
			}
			it, bad := mustParser(t, opts).parseLine([]byte(tc.line), 17)
			if bad != nil {
				t.Fatalf("bad line: %+v", bad)
			}
			if it.Line != 17 || it.CustomID != tc.id || it.Endpoint != tc.endpoint || it.MaxTokens != tc.maxTok || it.PromptBytes != tc.prompt {
				t.Errorf("item = line %d id %q endpoint %s max %d prompt %d; want 17 %q %s %d %d",
					it.Line, it.CustomID, it.Endpoint, it.MaxTokens, it.PromptBytes, tc.id, tc.endpoint, tc.maxTok, tc.prompt)
			}
			if k := duplicateKey(it.Body); k != "" {
				t.Errorf("body %s has %q twice", it.Body, k)
			}
			if got, want := decode(t, it.Body), jsonMap(t, tc.body); !reflect.DeepEqual(got, want) {
				t.Errorf("body\n got %s\nwant %s", it.Body, tc.body)
			}
		})
	}
}

func TestParseLineBad(t *testing.T) {
	t.Parallel()
	const user = `[{"role":"user","content":"hi"}]`
	comp := Options{Endpoint: EndpointCompletions}
	tests := []struct {
		name string
		opts Options
		line string
		id   string // CustomID the bad line must carry
		want string // substring of the message, after "line 17: "
	}{
		{name: "not json", line: `not json`, want: "invalid JSON: invalid character"},
		{name: "truncated", line: `{"id":"a","messages":[`, want: "invalid JSON"},
		{name: "array", line: `[1,2]`, want: "a line must be a JSON object, got an array"},
		{name: "string", line: `"x"`, want: "a line must be a JSON object, got a string"},
		{name: "no id", line: `{"messages":` + user + `}`, want: `missing "custom_id" (or "id")`},
		{name: "null id", line: `{"id":null,"messages":` + user + `}`, want: `missing "custom_id" (or "id")`},
		{name: "bool id", line: `{"id":true,"messages":` + user + `}`, want: `"id" must be a string or an integer, got a boolean`},
		{name: "fraction id", line: `{"custom_id":1.5,"messages":` + user + `}`, want: `"custom_id" must be a string or an integer, got 1.5`},
		{name: "huge float id", line: `{"id":1e400,"messages":` + user + `}`, want: `"id" must be a string or an integer`},
		{name: "empty id", line: `{"id":"","messages":` + user + `}`, want: `"id" must not be empty`},
		{name: "messages object", line: `{"id":"a","messages":{}}`, id: "a", want: `"messages" must be an array, got an object`},
		{name: "messages empty", line: `{"id":"a","messages":[]}`, id: "a", want: `"messages" must not be empty`},
		{name: "message not object", line: `{"id":"a","messages":[1]}`, id: "a", want: `"messages[0]" must be an object, got a number`},
		{name: "message no role", line: `{"id":"a","messages":[{"role":"user","content":"x"},{"content":"x"}]}`, id: "a", want: `"messages[1].role" must be a string`},
		{name: "message bad content", line: `{"id":"a","messages":[{"role":"user","content":5}]}`, id: "a", want: `"messages[0].content" must be a string or an array, got a number`},
		{name: "prompt on chat", line: `{"id":"a","prompt":"x"}`, id: "a", want: `"prompt" needs endpoint /v1/completions, but this line's endpoint is /v1/chat/completions`},
		{name: "nothing to send", line: `{"id":"a","text":"x"}`, id: "a", want: `missing "messages" (or "conversations", or "prompt" for /v1/completions)`},
		{name: "messages on completions", opts: comp, line: `{"id":"a","messages":` + user + `}`, id: "a", want: `"messages" needs endpoint /v1/chat/completions, but this line's endpoint is /v1/completions`},
		{name: "conversations on completions", opts: comp, line: `{"id":"a","conversations":[]}`, id: "a", want: `"conversations" needs endpoint /v1/chat/completions`},
		{name: "empty prompt", opts: comp, line: `{"id":"a","prompt":""}`, id: "a", want: `"prompt" must not be empty`},
		{name: "empty prompt array", opts: comp, line: `{"id":"a","prompt":[]}`, id: "a", want: `"prompt" must not be empty`},
		{name: "object prompt", opts: comp, line: `{"id":"a","prompt":{}}`, id: "a", want: `"prompt" must be a string, an array of strings or an array of token ids, got an object`},
		{name: "mixed prompt", opts: comp, line: `{"id":"a","prompt":["x",1]}`, id: "a", want: `"prompt" must be a string, an array of strings or an array of token ids`},
		{name: "no prompt", opts: comp, line: `{"id":"a"}`, id: "a", want: `missing "prompt"`},
		{name: "batch method", line: `{"custom_id":"b","method":"GET","url":"/v1/chat/completions","body":{"messages":` + user + `}}`, id: "b", want: `"method" must be "POST", got "GET"`},
		{name: "batch url", line: `{"custom_id":"b","method":"POST","url":"/v1/embeddings","body":{"messages":` + user + `}}`, id: "b", want: `"url" must be "/v1/chat/completions" or "/v1/completions", got "/v1/embeddings"`},
		{name: "batch body", line: `{"custom_id":"b","body":[1]}`, id: "b", want: `"body" must be an object, got an array`},
		{name: "batch no messages", line: `{"custom_id":"b","body":{"x":1}}`, id: "b", want: `missing "body.messages"`},
		{name: "batch messages", line: `{"custom_id":"b","body":{"messages":"hi"}}`, id: "b", want: `"body.messages" must be an array, got a string`},
		{name: "batch prompt on chat url", line: `{"custom_id":"b","url":"/v1/chat/completions","body":{"prompt":"hi"}}`, id: "b", want: `"body.prompt" needs endpoint /v1/completions`},
		{name: "batch max_tokens", line: `{"custom_id":"b","body":{"messages":` + user + `,"max_tokens":"10"}}`, id: "b", want: `"body.max_tokens" must be a positive integer, got "10"`},
		{name: "sharegpt from", line: `{"id":"s","conversations":[{"from":"robot","value":"x"}]}`, id: "s", want: `"conversations[0].from" must be human, user, gpt, assistant or system, got "robot"`},
		{name: "sharegpt value", line: `{"id":"s","conversations":[{"from":"human","value":5}]}`, id: "s", want: `"conversations[0].value" must be a string`},
		{name: "sharegpt no human", line: `{"id":"s","conversations":[{"from":"system","value":"x"},{"from":"gpt","value":"y"}]}`, id: "s", want: `"conversations" has no human turn to answer`},
		{name: "sharegpt not array", line: `{"id":"s","conversations":"x"}`, id: "s", want: `"conversations" must be an array, got a string`},
		{name: "max_tokens zero", line: `{"id":"a","messages":` + user + `,"max_tokens":0}`, id: "a", want: `"max_tokens" must be a positive integer, got 0`},
		{name: "max_tokens huge", line: `{"id":"a","messages":` + user + `,"max_tokens":1e30}`, id: "a", want: `"max_tokens" must be a positive integer, got 1e30`},
		{name: "max_completion_tokens fraction", line: `{"id":"a","messages":` + user + `,"max_completion_tokens":2.5}`, id: "a", want: `"max_completion_tokens" must be a positive integer, got 2.5`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			it, bad := mustParser(t, tc.opts).parseLine([]byte(tc.line), 17)
			if bad == nil {
				t.Fatalf("got item %+v, want a bad line", it)
			}
			if bad.Line != 17 || bad.Code != CodeInvalidInput || bad.CustomID != tc.id {
				t.Errorf("bad = %+v, want line 17, code %s, id %q", bad, CodeInvalidInput, tc.id)
			}
			if want := "line 17: " + tc.want; !strings.HasPrefix(bad.Message, want) {
				t.Errorf("message = %q, want prefix %q", bad.Message, want)
			}
			if it.Body != nil {
				t.Errorf("a bad line came with a body")
			}
		})
	}
}

func TestNewParserRejectsBadParams(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		opts Options
	}{
		{"endpoint", Options{Endpoint: "/v1/embeddings"}},
		{"max_tokens string", Options{Params: map[string]any{"max_tokens": "many"}}},
		{"max_completion_tokens negative", Options{Params: map[string]any{"max_completion_tokens": -1}}},
		{"unencodable", Options{Params: map[string]any{"x": func() {}}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			if _, err := newParser(tc.opts); err == nil {
				t.Fatal("newParser accepted bad options")
			}
		})
	}
}

func TestValidMatchesEncodingJSON(t *testing.T) {
	t.Parallel()
	tests := []string{
		`{}`, `[]`, `""`, `0`, `-0.0e-0`, `1E+9`, `true`, `null`, ` [ 1 , 2 ] `,
		`{"a":[1,{"b":"\"\\\/\b\f\n\r\t\u00E9"}]}`,
		``, ` `, `{`, `}`, `[1,]`, `{"a":1,}`, `{"a"}`, `{1:2}`, `01`, `-`, `1.`, `1e`, `.5`, `+1`,
		`"\a"`, "\"\t\"", `"\u00g0"`, `tru`, `nulll`, `[1 2]`, `{"a":1}x`, `"unterminated`,
		strings.Repeat("[", maxDepth) + strings.Repeat("]", maxDepth),
		strings.Repeat("[", maxDepth+1) + strings.Repeat("]", maxDepth+1),
		strings.Repeat(`{"a":`, maxDepth) + "1" + strings.Repeat("}", maxDepth),
		strings.Repeat(`{"a":`, maxDepth+1) + "1" + strings.Repeat("}", maxDepth+1),
	}
	var v validator
	for _, s := range tests {
		if got, want := v.valid([]byte(s)), json.Valid([]byte(s)); got != want {
			t.Errorf("valid(%.40q) = %v, json.Valid says %v", s, got, want)
		}
	}
}

// duplicateKey returns a top-level key that occurs twice in the object b.
func duplicateKey(b []byte) string {
	seen := map[string]bool{}
	dec := json.NewDecoder(bytes.NewReader(b))
	if _, err := dec.Token(); err != nil {
		return ""
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return ""
		}
		k, _ := tok.(string)
		if seen[k] {
			return k
		}
		seen[k] = true
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return ""
		}
	}
	return ""
}
