package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// LoadConfig is a closed-loop HTTP load: PerServer workers per URL, each
// sending one chat request after another until Duration ends.
type LoadConfig struct {
	URLs      []string
	PerServer int
	Duration  time.Duration
	MaxTokens int  // default 16384
	Thinking  bool // chat_template_kwargs.enable_thinking
	Stream    bool
	Seed      int64
}

// LoadResult counts what the load client saw.
type LoadResult struct {
	Requests         int64 // completed with HTTP 200
	Errors           int64 // other statuses and transport errors (not counting the cut-off at the end)
	CompletionTokens int64
}

// RunLoad runs the closed-loop load. In-flight requests are cancelled when
// Duration ends (the servers count them as aborted).
func RunLoad(ctx context.Context, cfg LoadConfig) (LoadResult, error) {
	if len(cfg.URLs) == 0 || cfg.PerServer <= 0 {
		return LoadResult{}, fmt.Errorf("load: need URLs and PerServer > 0")
	}
	maxTok := orI(cfg.MaxTokens, 16384)
	tr := &http.Transport{
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		MaxIdleConns:        len(cfg.URLs) * (cfg.PerServer + 8),
		MaxIdleConnsPerHost: cfg.PerServer + 8,
		IdleConnTimeout:     4 * time.Second, // under SGLang's 5 s keep-alive
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr}
	ctx, cancel := context.WithTimeout(ctx, cfg.Duration)
	defer cancel()
	var res LoadResult
	var mu sync.Mutex
	var seq atomic.Int64
	var wg sync.WaitGroup
	pad := strings.Repeat("Explain the following topic in detail with examples. ", 30)
	for _, u := range cfg.URLs {
		for range cfg.PerServer {
			wg.Go(func() {
				var mine LoadResult
				for ctx.Err() == nil {
					n := seq.Add(1)
					text := benchPrompt(int(cfg.Seed), int(n), pad)
					body, _ := json.Marshal(map[string]any{ // a map of plain values always encodes
						"model": "default", "messages": []map[string]string{{"role": "user", "content": text}},
						"max_completion_tokens": maxTok, "stream": cfg.Stream,
						"stream_options":       map[string]bool{"include_usage": true},
						"chat_template_kwargs": map[string]bool{"enable_thinking": cfg.Thinking},
					})
					tok, err := loadOne(ctx, client, u, body, cfg.Stream)
					switch {
					case err == nil:
						mine.Requests++
						mine.CompletionTokens += tok
					case ctx.Err() == nil:
						mine.Errors++
					}
				}
				mu.Lock()
				res.Requests += mine.Requests
				res.Errors += mine.Errors
				res.CompletionTokens += mine.CompletionTokens
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	return res, nil
}

func loadOne(ctx context.Context, client *http.Client, url string, body []byte, stream bool) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url+"/v1/chat/completions", bytes.NewReader(body))
	if err != nil {
		return 0, fmt.Errorf("new request: %w", err)
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return 0, fmt.Errorf("post: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return 0, fmt.Errorf("read: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("status %d", resp.StatusCode)
	}
	if stream {
		i := bytes.LastIndex(data, []byte(`"usage":`))
		if i < 0 {
			return 0, fmt.Errorf("stream without usage")
		}
		data = []byte("{" + string(data[i:bytes.IndexByte(data[i:], '}')+i+1]) + "}")
	}
	var out struct {
		Usage struct {
			CompletionTokens int64 `json:"completion_tokens"`
		} `json:"usage"`
	}
	if err := json.Unmarshal(data, &out); err != nil {
		return 0, fmt.Errorf("decode: %w", err)
	}
	return out.Usage.CompletionTokens, nil
}

// CPUSeconds is the process's user plus system CPU time, or the children's
// that were waited for.
func CPUSeconds(children bool) float64 {
	who := syscall.RUSAGE_SELF
	if children {
		who = syscall.RUSAGE_CHILDREN
	}
	var ru syscall.Rusage
	if err := syscall.Getrusage(who, &ru); err != nil {
		return 0
	}
	tv := func(t syscall.Timeval) float64 { return float64(t.Sec) + float64(t.Usec)/1e6 }
	return tv(ru.Utime) + tv(ru.Stime)
}
