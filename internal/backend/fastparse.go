package backend

import (
	"bytes"
	"strconv"

	"github.com/gend-dev/gend/internal/jsonlex"
)

// summary is what parseBody needs from a 200 response body.
type summary struct {
	id                     string
	choices                int
	finish                 *string // choices[0].finish_reason
	hasUsage               bool
	promptTok, complTokens int64
}

// scanSummary reads the fields parseBody needs in one pass over raw while
// checking that raw is valid JSON, several times cheaper than
// json.Unmarshal (which scans the whole body twice, through a state machine,
// to find four fields in front of and behind the generated text). It
// reports ok only when its answer is certainly what json.Unmarshal into
// bodySummary would give: a plain object whose relevant keys and values
// have the expected types and plain ASCII spelling, each key once, no
// "error". Anything else (invalid JSON included) is ok == false, and the
// caller takes the encoding/json path, so the outcome never differs.
func scanSummary(raw []byte) (s summary, ok bool) {
	sc := scanner{b: raw}
	sc.ws()
	if !sc.object(func(key []byte) bool {
		switch string(key) {
		case "id":
			v, isNull, ok := sc.plainString()
			if ok && !isNull {
				s.id = v
			}
			return ok
		case "choices":
			return sc.choices(&s)
		case "usage":
			return sc.usage(&s)
		case "error":
			return false // classified by the encoding/json path
		}
		return sc.value()
	}, "id", "choices", "usage", "error") {
		return summary{}, false
	}
	sc.ws()
	return s, sc.i == len(sc.b)
}

// scanner walks JSON as encoding/json's validator does: RFC 8259 syntax,
// any byte ≥ 0x20 inside strings.
type scanner struct {
	b     []byte
	i     int
	depth int
}

const maxScanDepth = 512 // deeper: leave it to encoding/json

func (s *scanner) ws() {
	for s.i < len(s.b) {
		switch s.b[s.i] {
		case ' ', '\t', '\n', '\r':
			s.i++
		default:
			return
		}
	}
}

// object parses an object, calling field for every key with s positioned
// at its value (after the colon and whitespace); field must consume the
// value. Keys that fold to one of names without being exactly one of them,
// repeated names, and keys with escapes or non-ASCII bytes make it fail.
func (s *scanner) object(field func(key []byte) bool, names ...string) bool {
	if empty, ok := s.open('{', '}'); empty || !ok {
		return ok
	}
	var seen uint32
	for {
		start, end, plain, ok := s.str()
		if !ok {
			return false
		}
		key := s.b[start:end]
		if len(names) > 0 {
			if !plain {
				return false
			}
			for n, name := range names {
				if bytes.EqualFold(key, []byte(name)) {
					if string(key) != name || seen&(1<<n) != 0 {
						return false
					}
					seen |= 1 << n
				}
			}
		}
		s.ws()
		if s.i >= len(s.b) || s.b[s.i] != ':' {
			return false
		}
		s.i++
		s.ws()
		if !field(key) {
			return false
		}
		if more, ok := s.next('}'); !more {
			return ok
		}
	}
}

// open enters a container starting with left: ok false on anything else or
// past maxScanDepth; empty when right follows at once (consumed, depth
// restored).
func (s *scanner) open(left, right byte) (empty, ok bool) {
	if s.i >= len(s.b) || s.b[s.i] != left {
		return false, false
	}
	s.depth++
	if s.depth > maxScanDepth {
		return false, false
	}
	s.i++
	s.ws()
	if s.i < len(s.b) && s.b[s.i] == right {
		s.i++
		s.depth--
		return true, true
	}
	return false, true
}

// next reads what follows a container's element: ',' (more follows) or
// right (the container closes, depth restored); ok false on anything else.
func (s *scanner) next(right byte) (more, ok bool) {
	s.ws()
	if s.i >= len(s.b) {
		return false, false
	}
	switch s.b[s.i] {
	case ',':
		s.i++
		s.ws()
		return true, true
	case right:
		s.i++
		s.depth--
		return false, true
	}
	return false, false
}

// array parses an array, calling elem with s positioned at each element.
func (s *scanner) array(elem func(i int) bool) bool {
	if empty, ok := s.open('[', ']'); empty || !ok {
		return ok
	}
	for n := 0; ; n++ {
		if !elem(n) {
			return false
		}
		if more, ok := s.next(']'); !more {
			return ok
		}
	}
}

// value skips any JSON value, validating it.
func (s *scanner) value() bool {
	if s.i >= len(s.b) {
		return false
	}
	switch c := s.b[s.i]; {
	case c == '"':
		_, _, _, ok := s.str()
		return ok
	case c == '{':
		return s.object(func([]byte) bool { return s.value() })
	case c == '[':
		return s.array(func(int) bool { return s.value() })
	case c == 't':
		return s.lit("true")
	case c == 'f':
		return s.lit("false")
	case c == 'n':
		return s.lit("null")
	case c == '-' || (c >= '0' && c <= '9'):
		_, ok := s.number()
		return ok
	}
	return false
}

func (s *scanner) lit(w string) bool {
	if len(s.b)-s.i < len(w) || string(s.b[s.i:s.i+len(w)]) != w {
		return false
	}
	s.i += len(w)
	return true
}

// str parses a string; [start, end) is its raw content; plain says it has
// no escapes and only ASCII, so the raw content is its value.
func (s *scanner) str() (start, end int, plain, ok bool) {
	e, plain, ok := jsonlex.String(s.b, s.i)
	if !ok {
		return 0, 0, false, false
	}
	start, s.i = s.i+1, e
	return start, e - 1, plain, true
}

// number parses a number; integer says it is -?digits only.
func (s *scanner) number() (integer, ok bool) {
	e, integer, ok := jsonlex.Number(s.b, s.i)
	if ok {
		s.i = e
	}
	return integer, ok
}

// plainString parses a string with a plain value, or null.
func (s *scanner) plainString() (v string, isNull, ok bool) {
	if s.i < len(s.b) && s.b[s.i] == 'n' {
		return "", true, s.lit("null")
	}
	start, end, plain, ok := s.str()
	if !ok || !plain {
		return "", false, false
	}
	return string(s.b[start:end]), false, true
}

// int64Field parses an integer that fits int64, or null (no change).
func (s *scanner) int64Field(dst *int64) bool {
	if s.i < len(s.b) && s.b[s.i] == 'n' {
		return s.lit("null")
	}
	start := s.i
	integer, ok := s.number()
	if !ok || !integer {
		return false
	}
	n, err := strconv.ParseInt(string(s.b[start:s.i]), 10, 64)
	if err != nil {
		return false
	}
	*dst = n
	return true
}

// choices parses the choices array: objects (or null), finish_reason a
// plain string or null in each.
func (s *scanner) choices(sum *summary) bool {
	return s.array(func(n int) bool {
		sum.choices = n + 1
		if s.i < len(s.b) && s.b[s.i] == 'n' {
			return s.lit("null")
		}
		return s.object(func(key []byte) bool {
			if string(key) != "finish_reason" {
				return s.value()
			}
			v, isNull, ok := s.plainString()
			if ok && !isNull && n == 0 {
				sum.finish = &v
			}
			return ok
		}, "finish_reason")
	})
}

// usage parses the usage object (or null).
func (s *scanner) usage(sum *summary) bool {
	if s.i < len(s.b) && s.b[s.i] == 'n' {
		return s.lit("null")
	}
	sum.hasUsage = true
	return s.object(func(key []byte) bool {
		switch string(key) {
		case "prompt_tokens":
			return s.int64Field(&sum.promptTok)
		case "completion_tokens":
			return s.int64Field(&sum.complTokens)
		}
		return s.value()
	}, "prompt_tokens", "completion_tokens")
}
