package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestExitCodes(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		args    []string
		want    int
		stderrH string
	}{
		{"unknown flag", []string{"--nope"}, 2, "flag provided but not defined"},
		{"stray argument", []string{"serve"}, 2, "unexpected argument"},
		{"missing scenario", []string{"--port", "0", "--scenario", "/nonexistent.yaml"}, 1, "read scenario"},
		{"bad preset", []string{"--port", "0", "--gpu", "tpu"}, 1, "unknown gpu"},
		{"bad output dist", []string{"--port", "0", "--output-dist", "gamma:-1"}, 1, `output_dist "gamma:-1": shape must be > 0`},
		{"bad runaway", []string{"--port", "0", "--output-runaway", "0.7"}, 1, "output_runaway 0.7: must be in [0, 0.5]"},
		{"bad bench level", []string{"bench", "--concurrency", "8,x"}, 2, "bad level"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var out, errb bytes.Buffer
			if got := run(tt.args, &out, &errb); got != tt.want || !strings.Contains(errb.String(), tt.stderrH) {
				t.Fatalf("exit %d, stderr %q; want %d and %q", got, errb.String(), tt.want, tt.stderrH)
			}
		})
	}
}

func TestBenchTableOnly(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	code := run([]string{"bench", "--concurrency", "8,64", "--warmup-s", "300", "--measure-s", "600", "--cpu-servers", "0"}, &out, &errb)
	if code != 0 || !strings.Contains(out.String(), "out tok/s") || strings.Count(out.String(), "\n") != 4 {
		t.Fatalf("exit %d\nstdout %s\nstderr %s", code, out.String(), errb.String())
	}
}
