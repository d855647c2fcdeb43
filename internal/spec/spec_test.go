package spec

import (
	"errors"
	"strings"
	"testing"

	"github.com/gend-dev/gend/api"
)

func TestDecodeJobDefaults(t *testing.T) {
	s, err := DecodeJob([]byte(`
name: x
input: data/p.jsonl
request: {params: {max_tokens: 512, temperature: 0.6}}
output: {dir: out}
`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if s.Scheduler.Mode != api.ModeAdaptive || s.Scheduler.PerServerMax != 1024 || s.MaxAttempts != 5 ||
		s.Output.ShardRecords != 10000 || s.Output.ShardSeconds != 300 || s.Request.Endpoint != "/v1/chat/completions" || s.Order != "input" {
		t.Fatalf("defaults not applied: %+v", s)
	}
	if v, ok := s.Request.Params["max_tokens"].(int64); !ok || v != 512 {
		t.Fatalf("max_tokens decoded as %T %v, want int64 512", s.Request.Params["max_tokens"], s.Request.Params["max_tokens"])
	}
	if MaxTokens(s.Request.Params) != 512 {
		t.Fatal("MaxTokens")
	}
}

func TestDecodeJobListsEveryProblem(t *testing.T) {
	_, err := DecodeJob([]byte(`{"input":"","order":"sideways","request":{"endpoint":"/v2/x","params":{"stream":true}},
		"output":{"dir":"","s3":"http://x"},"scheduler":{"mode":"static"},"max_attempts":500,"servers":["a","a","zz"],"shard":"3/2"}`),
		map[string]bool{"a": true})
	var inv *Invalid
	if !errors.As(err, &inv) {
		t.Fatalf("want *Invalid, got %v", err)
	}
	want := []string{"input:", "order:", "request.endpoint:", "request.params.stream:", "output.dir:", "output.s3:",
		"max_attempts:", "listed twice", `"zz" is not in the fleet`, "shard:"}
	msg := strings.Join(inv.Problems, "\n")
	for _, w := range want {
		if !strings.Contains(msg, w) {
			t.Errorf("problems lack %q:\n%s", w, msg)
		}
	}
}

func TestDecodeJobUnknownField(t *testing.T) {
	_, err := DecodeJob([]byte("input: a\noutput: {dir: o}\nschedulr: {}\n"), nil)
	if err == nil || !strings.Contains(err.Error(), "schedulr") {
		t.Fatalf("unknown field not named: %v", err)
	}
}

func TestResize(t *testing.T) {
	n := func(v int) *int { return &v }
	tests := []struct {
		name string
		cur  api.SchedulerSpec
		body string
		want api.SchedulerSpec
		bad  bool
	}{
		{"cap adaptive", api.SchedulerSpec{Mode: "adaptive", PerServerMax: 1024}, `{"per_server_max": 64}`, api.SchedulerSpec{Mode: "adaptive", PerServerMax: 64}, false},
		{"pin static", api.SchedulerSpec{Mode: "adaptive", PerServerMax: 1024}, `{"mode": "static", "per_server": 32}`, api.SchedulerSpec{Mode: "static", PerServer: 32, PerServerMax: 1024}, false},
		{"cap lowers static", api.SchedulerSpec{Mode: "static", PerServer: 100, PerServerMax: 1024}, `{"per_server_max": 40}`, api.SchedulerSpec{Mode: "static", PerServer: 40, PerServerMax: 40}, false},
		{"unpin", api.SchedulerSpec{Mode: "static", PerServer: 8, PerServerMax: 1024}, `{"mode": "adaptive"}`, api.SchedulerSpec{Mode: "adaptive", PerServerMax: 1024}, false},
		{"total", api.SchedulerSpec{Mode: "adaptive", PerServerMax: 1024}, `{"total_max": 100}`, api.SchedulerSpec{Mode: "adaptive", PerServerMax: 1024, TotalMax: 100}, false},
		{"static without per_server", api.SchedulerSpec{}, `{"mode": "static"}`, api.SchedulerSpec{}, true},
		{"empty", api.SchedulerSpec{}, `{}`, api.SchedulerSpec{}, true},
		{"negative", api.SchedulerSpec{}, `{"per_server_max": -1}`, api.SchedulerSpec{}, true},
		{"unknown field", api.SchedulerSpec{}, `{"per_server_maxx": 3}`, api.SchedulerSpec{}, true},
	}
	_ = n
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := DecodeResize([]byte(tt.body))
			if tt.bad {
				if err == nil {
					t.Fatal("want an error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := ApplyResize(tt.cur, r); got != tt.want {
				t.Fatalf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestDecodeConfig(t *testing.T) {
	c, err := DecodeConfig([]byte("servers:\n  - {name: gpu0, url: 'http://127.0.0.1:30000/', gpus: [0]}\nmodel: {weight_bytes: 5.4e10, kv_bytes_per_token: 262144}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if c.Servers[0].URL != "http://127.0.0.1:30000" || c.Model.KVBytesPerToken != 262144 {
		t.Fatalf("%+v", c)
	}
	_, err = DecodeConfig([]byte("servers:\n  - {name: 'a b', url: 'ftp://x'}\n  - {name: 'a b', url: 'http://x'}\n"))
	var inv *Invalid
	if !errors.As(err, &inv) || len(inv.Problems) != 4 {
		t.Fatalf("want 4 problems (2 names, url, duplicate), got %v", err)
	}
}

// Fuzz targets (issue 5): decoders never panic, and what they accept
// validates.
func FuzzDecodeJob(f *testing.F) {
	for _, s := range []string{
		"input: a.jsonl\noutput: {dir: o}\n",
		`{"input":"s3://b/k","output":{"dir":"o","s3":"s3://b/p/"},"scheduler":{"mode":"static","per_server":4}}`,
		"input: a\noutput: {dir: o}\nrequest: {params: {max_tokens: 1e3, nested: {a: [1, 2.5, null]}}}\n",
		"- a\n- b\n", "{", "input: [", "shard: 1/0\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		s, err := DecodeJob(raw, nil)
		if err != nil {
			return
		}
		if p := ValidateJob(s, nil); len(p) > 0 {
			t.Fatalf("accepted spec does not validate: %v", p)
		}
	})
}

func FuzzDecodeResize(f *testing.F) {
	for _, s := range []string{`{"per_server_max":5}`, `{"mode":"static","per_server":3}`, `{"mode":"adaptive"}`, `{"total_max":0}`, `[]`, `null`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		r, err := DecodeResize(raw)
		if err != nil {
			return
		}
		got := ApplyResize(api.SchedulerSpec{Mode: api.ModeAdaptive, PerServerMax: 1024}, r)
		if got.Mode == api.ModeStatic && got.PerServer < 1 {
			t.Fatalf("static limit %d from %s", got.PerServer, raw)
		}
		if got.PerServerMax < 1 || got.TotalMax < 0 {
			t.Fatalf("bad caps %+v from %s", got, raw)
		}
	})
}

func FuzzDecodeServer(f *testing.F) {
	for _, s := range []string{`{"name":"gpu0","url":"http://127.0.0.1:30000","gpus":[0,1]}`, `{"name":"","url":""}`, `{"name":"x","url":"http://h","host":"http://g:9410"}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		s, err := DecodeServer(raw)
		if err != nil {
			return
		}
		if p := ValidateServer(s, ""); len(p) > 0 {
			t.Fatalf("accepted server does not validate: %v", p)
		}
	})
}
