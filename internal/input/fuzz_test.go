package input

import (
	"encoding/json"
	"strings"
	"testing"
)

// FuzzParseLine checks the line parser on arbitrary bytes: it never
// panics, gives exactly one result, and every item is a sendable body.
// Seeds: testdata/fuzz/FuzzParseLine.
func FuzzParseLine(f *testing.F) {
	f.Add([]byte(`{"custom_id":"a","messages":[{"role":"user","content":"hi"}]}`))
	parsers := []*parser{
		mustParser(f, Options{Model: "m", Params: map[string]any{"max_tokens": 64, "temperature": 0.7}}),
		mustParser(f, Options{Endpoint: EndpointCompletions, Params: map[string]any{"max_completion_tokens": 8, "model": "pm", "top_k": 2}}),
	}
	f.Fuzz(func(t *testing.T, line []byte) {
		for _, p := range parsers {
			it, bad := p.parseLine(line, 3)
			if bad != nil {
				if it.Body != nil {
					t.Fatalf("both an item and a bad line")
				}
				if bad.Code != CodeInvalidInput || !strings.HasPrefix(bad.Message, "line 3: ") {
					t.Fatalf("bad line %+v", bad)
				}
				continue
			}
			if it.CustomID == "" || it.Line != 3 || it.MaxTokens <= 0 || it.PromptBytes < 0 {
				t.Fatalf("item %+v", it)
			}
			if k := duplicateKey(it.Body); k != "" {
				t.Fatalf("body %s has %q twice", it.Body, k)
			}
			var body map[string]json.RawMessage
			if err := json.Unmarshal(it.Body, &body); err != nil {
				t.Fatalf("body %q is not a JSON object: %v", it.Body, err)
			}
			for _, k := range []string{"stream", "stream_options", "rid", "request_id"} {
				if _, ok := body[k]; ok {
					t.Fatalf("body %s carries %q", it.Body, k)
				}
			}
			key := "messages"
			if it.Endpoint == EndpointCompletions {
				key = "prompt"
			}
			if _, ok := body[key]; !ok {
				t.Fatalf("body %s for %s has no %q", it.Body, it.Endpoint, key)
			}
			if lim := "max_tokens"; it.Endpoint == EndpointChat {
				lim = "max_completion_tokens"
				if _, ok := body[lim]; !ok {
					t.Fatalf("chat body %s has no %s", it.Body, lim)
				}
			} else if _, ok := body[lim]; !ok {
				t.Fatalf("completion body %s has no %s", it.Body, lim)
			}
		}
	})
}

// FuzzValid checks that the validator agrees with json.Valid.
func FuzzValid(f *testing.F) {
	for _, s := range []string{
		`{}`, `[]`, `{"a":[1,-0.5e+3,true,false,null,"\u00e9\n"]}`, ` {"a" : {"b":[]} } `,
		`{"a":}`, `[1,]`, `{"a" 1}`, `01`, `1.`, `-`, `"\x"`, "\"\x01\"", `"\u12g4"`, `[[[`, `nul`, `{"a":1}}`,
	} {
		f.Add([]byte(s))
	}
	var v validator
	f.Fuzz(func(t *testing.T, b []byte) {
		if got, want := v.valid(b), json.Valid(b); got != want {
			t.Fatalf("valid(%q) = %v, json.Valid says %v", b, got, want)
		}
	})
}
