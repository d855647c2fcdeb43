package backend

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
)

var summaryCorpus = []string{
	chatBody,
	`{"id":"a","choices":[{"finish_reason":"stop","text":"x"}],"usage":{"prompt_tokens":3,"completion_tokens":4}}`,
	`{"id":null,"choices":[null,{"finish_reason":null}],"usage":null}`,
	`{"choices":[],"usage":{}}`,
	`{}`, `null`, `[]`, `"x"`, `5`, ``, `{`, `{"id":"a",}`, `{"id":"a"} x`, ` {"id" : "a" , "choices" : [ { } ] } `,
	`{"ID":"a","choices":[{}]}`, `{"id":"a","Choices":[{}]}`, `{"id":"a","id":"b","choices":[{}]}`,
	`{"id":"\u0061","choices":[{}]}`, `{"i\u0064":"a","choices":[{}]}`, `{"id":"é","choices":[{}]}`,
	`{"id":5,"choices":[{}]}`, `{"choices":[1]}`, `{"choices":{}}`, `{"choices":null}`,
	`{"choices":[{"finish_reason":5}]}`, `{"choices":[{"finish_reason":"a"},{"finish_reason":7}]}`,
	`{"choices":[{"finish_reason":"a","finish_reason":"b"}]}`, `{"choices":[{"FINISH_REASON":"b"}]}`,
	`{"choices":[{}],"usage":{"prompt_tokens":1.0}}`, `{"choices":[{}],"usage":{"prompt_tokens":1e2}}`,
	`{"choices":[{}],"usage":{"prompt_tokens":-0,"completion_tokens":null}}`,
	`{"choices":[{}],"usage":{"prompt_tokens":99999999999999999999}}`, `{"choices":[{}],"usage":{"prompt_tokens":"3"}}`,
	`{"choices":[{}],"usage":[]}`, `{"choices":[{}],"error":null}`, `{"choices":[{}],"error":{"code":503,"message":"full"}}`,
	`{"choices":[{}],"x":[1,-2.5e+3,true,false,null,{"a":"\n"}]}`, `{"choices":[{}],"x":"a` + "\x01" + `"}`,
	`{"choices":[{}],"x":01}`, `{"choices":[{}],"x":1.}`, `{"choices":[{}],"x":-}`, `{"choices":[{}],"x":"\x"}`,
	`{"choices":[{}],"x":"\u12G4"}`, `{"choices":[{}],"x":tru}`, `{"choices":[{}],"x":[1,]}`, `{"choices":[{}],"x":"` + "\xff" + `"}`,
	`{"choices":[{"message":{"content":"` + strings.Repeat("ab\\\"c ", 100) + `"},"finish_reason":"length"}]}`,
	`{"choices":[{}],"x":` + strings.Repeat("[", 600) + strings.Repeat("]", 600) + `}`,
}

// TestScanSummaryAgreesWithEncodingJSON: whenever the fast scan answers, the
// body is valid JSON and encoding/json reads the same fields from it.
func TestScanSummaryAgreesWithEncodingJSON(t *testing.T) {
	fast := 0
	for _, body := range summaryCorpus {
		if checkSummary(t, []byte(body)) {
			fast++
		}
	}
	if fast < 5 {
		t.Fatalf("the fast scan took only %d of the corpus", fast)
	}
}

func checkSummary(t *testing.T, raw []byte) bool {
	t.Helper()
	got, ok := scanSummary(raw)
	if !ok {
		return false
	}
	if !json.Valid(raw) {
		t.Fatalf("fast scan accepted invalid JSON %q", raw)
	}
	want, err := slowSummary(raw)
	if err != nil {
		t.Fatalf("fast scan accepted %q; encoding/json: %v", raw, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%q: fast %+v, encoding/json %+v", raw, got, want)
	}
	return true
}

func TestParseBodyPaths(t *testing.T) {
	// The fast path takes a normal body and keeps it verbatim.
	if _, ok := scanSummary([]byte(chatBody)); !ok {
		t.Fatal("fast scan refused a plain chat completion")
	}
	r, err := parseBody([]byte(chatBody))
	if err != nil || string(r.Body) != chatBody || r.RequestID != "job7-1" || r.FinishReason != "length" || r.PromptTokens != 31 || r.CompletionTokens != 881 {
		t.Fatalf("%+v %v", r, err)
	}
	// Bodies the fast path leaves to encoding/json keep their old outcome.
	if _, err := parseBody([]byte(`{"choices":[{}],"error":{"code":503,"message":"The request queue is full."}}`)); err == nil || err.(*Error).Class != Overload {
		t.Fatalf("error field: %v", err)
	}
	if _, err := parseBody([]byte(`{"choices":[`)); err == nil || err.(*Error).Msg != "invalid JSON response" {
		t.Fatalf("invalid: %v", err)
	}
	if _, err := parseBody([]byte(`{"ID":"x","choices":[]}`)); err == nil || err.(*Error).Msg != "response has no choices" {
		t.Fatalf("no choices: %v", err)
	}
}

func FuzzScanSummary(f *testing.F) {
	for _, b := range summaryCorpus {
		f.Add([]byte(b))
	}
	f.Fuzz(func(t *testing.T, raw []byte) { checkSummary(t, raw) })
}

func BenchmarkParseBody(b *testing.B) {
	raw := []byte(chatBody)
	b.Run("fast", func(b *testing.B) {
		for b.Loop() {
			if _, err := parseBody(raw); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("encoding/json", func(b *testing.B) {
		for b.Loop() {
			if _, err := slowSummary(raw); err != nil {
				b.Fatal(err)
			}
		}
	})
}
