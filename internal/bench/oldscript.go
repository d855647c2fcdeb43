package bench

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gend-dev/gend/internal/sim"
)

// runOld is the ad-hoc script gend replaces, as a Go client: a fixed number
// of requests per server, prompts dealt round-robin to the servers up front,
// tasks launched one by one with a stagger, no retries (a failed request is
// lost).
func runOld(ctx context.Context, rc RunConfig, fleet *sim.Fleet, input string) (runOutcome, error) {
	var out runOutcome
	lines, err := readLines(input)
	if err != nil {
		return out, err
	}
	urls := fleet.URLs()
	dealt := make([]*dealtQueue, len(urls))
	for s := range dealt {
		dealt[s] = &dealtQueue{}
	}
	for i, l := range lines {
		q := dealt[i%len(urls)]
		q.items = append(q.items, l)
	}
	per := rc.Policy.PerServer
	tr := &http.Transport{MaxIdleConnsPerHost: per, IdleConnTimeout: 4 * time.Second, DisableCompression: true}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	stagger := time.Duration(rc.Stagger / rc.Speedup * float64(time.Second))

	var completed, lost, tokens atomic.Int64
	var wg sync.WaitGroup
	out.start = time.Now()
	// Worker k of server s is the (k·servers + s)-th task launched.
	for k := range per {
		for s := range urls {
			idx := k*len(urls) + s
			wg.Add(1)
			go func() {
				defer wg.Done()
				select {
				case <-ctx.Done():
					return
				case <-time.After(time.Duration(idx) * stagger):
				}
				q := dealt[s]
				for {
					body, ok := q.pop()
					if !ok || ctx.Err() != nil {
						return
					}
					n, err := oldRequest(ctx, hc, urls[s], body, rc.MaxTokens)
					if err != nil {
						if ctx.Err() == nil {
							lost.Add(1)
						}
						continue
					}
					completed.Add(1)
					tokens.Add(n)
				}
			}()
		}
	}
	wg.Wait()
	out.end = time.Now()
	out.stopped = ctx.Err() != nil
	out.completed, out.tokens = completed.Load(), tokens.Load()
	out.lost = lost.Load()
	if !out.stopped && out.lost+out.completed != int64(len(lines)) {
		return out, fmt.Errorf("old script: %d lost and %d completed of %d", out.lost, out.completed, len(lines))
	}
	return out, nil
}

// dealtQueue is one server's share of the prompts.
type dealtQueue struct {
	mu    sync.Mutex
	items [][]byte
}

func (q *dealtQueue) pop() ([]byte, bool) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.items) == 0 {
		return nil, false
	}
	b := q.items[0]
	q.items = q.items[1:]
	return b, true
}

// readLines reads the input's lines (the old script loads it all).
func readLines(path string) ([][]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open prompts: %w", err)
	}
	defer f.Close()
	var out [][]byte
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		var l promptLine
		if err := json.Unmarshal(sc.Bytes(), &l); err != nil {
			return nil, fmt.Errorf("prompts: %w", err)
		}
		out = append(out, mustJSON(l.Messages))
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read prompts: %w", err)
	}
	return out, nil
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err) // only plain structs are encoded here
	}
	return b
}

// oldRequest sends one chat request (messages is the JSON array) and returns
// the completion tokens.
func oldRequest(ctx context.Context, hc *http.Client, base string, messages []byte, maxTokens int) (int64, error) {
	var b bytes.Buffer
	b.WriteString(`{"model":"Qwen/Qwen3.6-27B","messages":`)
	b.Write(messages)
	fmt.Fprintf(&b, `,"max_tokens":%d,"temperature":0.6,"chat_template_kwargs":{"enable_thinking":true}}`, maxTokens)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v1/chat/completions", &b)
	if err != nil {
		return 0, fmt.Errorf("build request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return 0, fmt.Errorf("post: %w", err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, fmt.Errorf("read response: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("HTTP %d", resp.StatusCode)
	}
	var r struct {
		Usage struct {
			CompletionTokens int64 `json:"completion_tokens"`
		} `json:"usage"`
		Choices []struct {
			FinishReason *string `json:"finish_reason"`
		} `json:"choices"`
	}
	if err := json.Unmarshal(raw, &r); err != nil {
		return 0, fmt.Errorf("decode response: %w", err)
	}
	if len(r.Choices) == 0 || r.Choices[0].FinishReason == nil || *r.Choices[0].FinishReason == "abort" {
		return 0, fmt.Errorf("aborted or empty response")
	}
	return r.Usage.CompletionTokens, nil
}
