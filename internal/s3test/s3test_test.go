package s3test

import (
	"bufio"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
)

func get(t *testing.T, url string) (string, error) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

func TestStopRestartKeepsData(t *testing.T) {
	t.Parallel()
	srv := Start(t)
	srv.Put("bucket", "a/b.txt", []byte("hello"))
	if got, err := get(t, srv.URL()+"/bucket/a/b.txt"); err != nil || got != "hello" {
		t.Fatalf("get before stop: %q %v", got, err)
	}
	srv.Stop()
	if _, err := get(t, srv.URL()+"/bucket/a/b.txt"); err == nil {
		t.Fatal("get succeeded while stopped")
	}
	srv.Restart()
	if got, err := get(t, srv.URL()+"/bucket/a/b.txt"); err != nil || got != "hello" {
		t.Fatalf("get after restart: %q %v", got, err)
	}
	if keys := srv.Keys("bucket"); !slices.Equal(keys, []string{"a/b.txt"}) {
		t.Errorf("keys %v", keys)
	}
}

func TestDecodeChunked(t *testing.T) {
	t.Parallel()
	sig := ";chunk-signature=" + strings.Repeat("0", 64) + "\r\n"
	tests := []struct {
		name, in, want string
		ok             bool
	}{
		{"two chunks", "5" + sig + "hello\r\n" + "3" + sig + "abc\r\n" + "0" + sig + "\r\n", "helloabc", true},
		{"empty", "0" + sig + "\r\n", "", true},
		{"bad size", "zz" + sig, "", false},
		{"truncated", "5" + sig + "he", "", false},
	}
	for _, tt := range tests {
		got, err := decodeChunked(bufio.NewReader(strings.NewReader(tt.in)))
		if (err == nil) != tt.ok || string(got) != tt.want {
			t.Errorf("%s: %q, %v", tt.name, got, err)
		}
	}
}
