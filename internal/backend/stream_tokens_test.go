package backend

import (
	"context"
	"strings"
	"testing"
)

// TestStreamOnTokens checks what the ETA is told while a stream runs: the
// server's usage.completion_tokens when each chunk carries usage, else the
// number of chunks.
func TestStreamOnTokens(t *testing.T) {
	chunk := func(text, usage string) string {
		u := ""
		if usage != "" {
			u = `,"usage":` + usage
		}
		return `data: {"id":"a","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"` + text + `"}}]` + u + "}\n\n"
	}
	final := `data: {"id":"a","object":"chat.completion.chunk","choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}` + "\n\n" +
		`data: {"id":"a","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":3,"completion_tokens":40}}` + "\n\ndata: [DONE]\n\n"
	tests := []struct {
		name  string
		body  string
		want  []int  // OnTokens calls, in order
		exact []bool // and whether each was the server's own count
	}{
		{"chunks only", chunk("a", "") + chunk("b", "") + final, []int{1, 2, 3, 40}, []bool{false, false, false, true}},
		{"continuous usage", chunk("a", `{"prompt_tokens":3,"completion_tokens":12}`) +
			chunk("b", `{"prompt_tokens":3,"completion_tokens":25}`) + final, []int{12, 25, 25, 40}, []bool{true, true, true, true}},
		{"usage null", chunk("a", "null") + final, []int{1, 2, 40}, []bool{false, false, true}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got []int
			var exact []bool
			resp, err := readStream(context.Background(), strings.NewReader(tt.body), func(n int, ex bool) {
				got = append(got, n)
				exact = append(exact, ex)
			})
			if err != nil {
				t.Fatal(err)
			}
			if resp.CompletionTokens != 40 {
				t.Fatalf("completion tokens %d, want 40", resp.CompletionTokens)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("OnTokens calls %v, want %v", got, tt.want)
			}
			for i := range got {
				if got[i] != tt.want[i] || exact[i] != tt.exact[i] {
					t.Fatalf("OnTokens calls %v exact %v, want %v exact %v", got, exact, tt.want, tt.exact)
				}
			}
		})
	}
}
