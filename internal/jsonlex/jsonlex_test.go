package jsonlex

import (
	"encoding/json"
	"testing"
)

func TestString(t *testing.T) {
	tests := []struct {
		in           string
		end          int
		plain, valid bool
	}{
		{`"abc",`, 5, true, true},
		{`""`, 2, true, true},
		{`"a\"b"`, 6, false, true},
		{`"\u00e9x"`, 9, false, true},
		{`"é"`, 4, false, true},
		{`"\u00g9"`, 0, false, false},
		{`"\x"`, 0, false, false},
		{"\"a\nb\"", 0, false, false},
		{`"open`, 0, false, false},
		{`abc`, 0, false, false},
	}
	for _, tt := range tests {
		end, plain, ok := String([]byte(tt.in), 0)
		if ok != tt.valid || (ok && (end != tt.end || plain != tt.plain)) {
			t.Errorf("String(%q) = %d, %v, %v; want %d, %v, %v", tt.in, end, plain, ok, tt.end, tt.plain, tt.valid)
		}
	}
}

func TestNumber(t *testing.T) {
	tests := []struct {
		in             string
		end            int
		integer, valid bool
	}{
		{"0,", 1, true, true},
		{"-12}", 3, true, true},
		{"1.5", 3, false, true},
		{"2e10", 4, false, true},
		{"-0.1E-3", 7, false, true},
		{"01", 1, true, true}, // the 1 is the next token's problem
		{"1.", 0, false, false},
		{"-", 0, false, false},
		{"1e+", 0, false, false},
		{".5", 0, false, false},
	}
	for _, tt := range tests {
		end, integer, ok := Number([]byte(tt.in), 0)
		if ok != tt.valid || (ok && (end != tt.end || integer != tt.integer)) {
			t.Errorf("Number(%q) = %d, %v, %v; want %d, %v, %v", tt.in, end, integer, ok, tt.end, tt.integer, tt.valid)
		}
	}
}

// An input that is one string or number token (nothing around it) is valid
// exactly when encoding/json says so.
func FuzzTokens(f *testing.F) {
	for _, s := range []string{`"a"`, `"\u12ab"`, `12`, `-0.5e3`, `"\q"`, `1.`, "\"\x01\""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		b := []byte(s)
		if len(b) == 0 || !(b[0] == '"' || b[0] == '-' || isDigit(b[0])) || isSpace(b[len(b)-1]) {
			return
		}
		var want bool
		if len(b) > 0 && b[0] == '"' {
			end, _, ok := String(b, 0)
			want = ok && end == len(b)
		} else {
			end, _, ok := Number(b, 0)
			want = ok && end == len(b)
		}
		if got := json.Valid(b); got != want {
			t.Fatalf("%q: lexer %v, encoding/json %v", s, want, got)
		}
	})
}

func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }
