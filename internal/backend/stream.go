package backend

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
)

type streamChunk struct {
	ID      string          `json:"id"`
	Object  string          `json:"object"`
	Created int64           `json:"created"`
	Model   string          `json:"model"`
	Error   json.RawMessage `json:"error"`
	Choices []struct {
		Index int `json:"index"`
		Delta struct {
			Role             *string `json:"role"`
			Content          *string `json:"content"`
			ReasoningContent *string `json:"reasoning_content"`
			Reasoning        *string `json:"reasoning"`
		} `json:"delta"`
		Text         *string         `json:"text"`
		FinishReason *string         `json:"finish_reason"`
		MatchedStop  json.RawMessage `json:"matched_stop"`
		StopReason   json.RawMessage `json:"stop_reason"`
	} `json:"choices"`
	Usage json.RawMessage `json:"usage"`
}

// readStream consumes an SSE body (reference §4) and assembles the response
// a non-streaming request would have returned, so shards look the same
// either way. An error event on an HTTP 200 stream (SGLang's queue-full) is
// classified like the equivalent status.
func readStream(ctx context.Context, body io.Reader, onTokens func(n int, exact bool)) (Response, error) {
	// Small buffer: one per streamed request in flight; ReadBytes grows its
	// result for longer events.
	br := bufio.NewReaderSize(body, 4<<10)
	var (
		id, object, model          string
		created                    int64
		content, reasoning, text   strings.Builder
		hasReasoning, isCompletion bool
		finish                     *string
		matched                    json.RawMessage
		usageRaw                   json.RawMessage
		chunks                     int
		streamed                   int // completion_tokens from the last chunk that carried usage
		done                       bool
	)
	for !done {
		line, err := br.ReadBytes('\n')
		if len(line) > MaxResponseBytes {
			return Response{}, &Error{Class: Transient, Status: 200, Code: "request_failed", Msg: "stream event too large"}
		}
		line = bytes.TrimRight(line, "\r\n")
		if bytes.HasPrefix(line, []byte("data:")) {
			data := bytes.TrimSpace(line[5:])
			if string(data) == "[DONE]" {
				done = true
				continue
			}
			var c streamChunk
			if jerr := json.Unmarshal(data, &c); jerr != nil {
				return Response{}, &Error{Class: Transient, Status: 200, Code: "request_failed", Msg: "invalid stream event", Err: jerr}
			}
			if len(c.Error) > 0 && string(c.Error) != "null" {
				return Response{}, classifyStatus(errorCode(c.Error, 500), data)
			}
			if id == "" {
				id, object, model, created = c.ID, c.Object, c.Model, c.Created
			}
			for _, ch := range c.Choices {
				if ch.Delta.Content != nil {
					content.WriteString(*ch.Delta.Content)
				}
				if ch.Delta.ReasoningContent != nil {
					hasReasoning = true
					reasoning.WriteString(*ch.Delta.ReasoningContent)
				}
				if ch.Delta.Reasoning != nil {
					hasReasoning = true
					reasoning.WriteString(*ch.Delta.Reasoning)
				}
				if ch.Text != nil {
					isCompletion = true
					text.WriteString(*ch.Text)
				}
				if ch.FinishReason != nil {
					finish = ch.FinishReason
					if len(ch.MatchedStop) > 0 {
						matched = ch.MatchedStop
					}
				}
				chunks++
			}
			if len(c.Usage) > 0 && string(c.Usage) != "null" {
				usageRaw = c.Usage
				// Continuous usage stats (vLLM, SGLang, gensim): the
				// server's own output-token count so far.
				var u usage
				if json.Unmarshal(c.Usage, &u) == nil && u.CompletionTokens > 0 {
					streamed = int(u.CompletionTokens)
				}
			}
			if onTokens != nil {
				// Without usage on the chunks, the chunk count (one per
				// engine step, a lower bound on the tokens).
				onTokens(max(chunks, streamed), streamed > 0 && streamed >= chunks)
			}
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				break
			}
			return Response{}, transportError(ctx, err, true)
		}
	}
	if finish == nil {
		return Response{}, &Error{Class: Transient, Status: 200, Code: "request_failed", Msg: "stream ended without a finish reason"}
	}
	if *finish == "abort" || *finish == "error" {
		return Response{}, &Error{Class: Transient, Status: 200, Code: "request_failed", Msg: "finish_reason " + *finish}
	}
	if object == "chat.completion.chunk" {
		object = "chat.completion"
	}
	if isCompletion && object == "" {
		object = "text_completion"
	}
	out := map[string]any{"id": id, "object": object, "created": created, "model": model}
	choice := map[string]any{"index": 0, "finish_reason": *finish, "logprobs": nil}
	if len(matched) > 0 {
		choice["matched_stop"] = matched
	}
	if isCompletion {
		choice["text"] = text.String()
	} else {
		msg := map[string]any{"role": "assistant", "content": content.String()}
		if hasReasoning {
			msg["reasoning_content"] = reasoning.String()
		} else {
			msg["reasoning_content"] = nil
		}
		choice["message"] = msg
	}
	out["choices"] = []any{choice}
	var u usage
	if len(usageRaw) > 0 {
		out["usage"] = usageRaw
		_ = json.Unmarshal(usageRaw, &u)
	}
	raw, err := json.Marshal(out)
	if err != nil {
		return Response{}, &Error{Class: Transient, Code: "request_failed", Msg: "assemble stream", Err: err}
	}
	return Response{Status: 200, RequestID: id, Body: raw, PromptTokens: u.PromptTokens,
		CompletionTokens: u.CompletionTokens, FinishReason: *finish}, nil
}
