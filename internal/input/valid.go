package input

import "github.com/gend-dev/gend/internal/jsonlex"

// maxDepth matches encoding/json's nesting limit.
const maxDepth = 10000

// validator checks JSON syntax like json.Valid (same answers, fuzzed
// against it in FuzzValid), several times faster because it walks string
// bodies in a tight loop instead of a per-byte state function. Like
// json.Valid it does not check UTF-8. The stack is reused between calls.
type validator struct {
	stack []byte
}

func (v *validator) valid(b []byte) bool {
	v.stack = v.stack[:0]
	i := skipSpace(b, 0)
	needValue := true
	for {
		if needValue {
			if i >= len(b) {
				return false
			}
			switch c := b[i]; c {
			case '{', '[':
				close := byte('}')
				if c == '[' {
					close = ']'
				}
				i = skipSpace(b, i+1)
				if i < len(b) && b[i] == close {
					if len(v.stack) >= maxDepth {
						return false
					}
					i++
					needValue = false
					break
				}
				v.stack = append(v.stack, c)
				if len(v.stack) > maxDepth {
					return false
				}
				if c == '{' {
					var ok bool
					if i, ok = key(b, i); !ok {
						return false
					}
				}
				continue
			case '"':
				var ok bool
				if i, _, ok = jsonlex.String(b, i); !ok {
					return false
				}
			case 't':
				if !hasAt(b, i, "true") {
					return false
				}
				i += 4
			case 'f':
				if !hasAt(b, i, "false") {
					return false
				}
				i += 5
			case 'n':
				if !hasAt(b, i, "null") {
					return false
				}
				i += 4
			default:
				var ok bool
				if i, _, ok = jsonlex.Number(b, i); !ok {
					return false
				}
			}
			needValue = false
		}
		i = skipSpace(b, i)
		if len(v.stack) == 0 {
			return i == len(b)
		}
		if i >= len(b) {
			return false
		}
		top := v.stack[len(v.stack)-1]
		switch {
		case b[i] == ',':
			i = skipSpace(b, i+1)
			if top == '{' {
				var ok bool
				if i, ok = key(b, i); !ok {
					return false
				}
			}
			needValue = true
		case (top == '{' && b[i] == '}') || (top == '[' && b[i] == ']'):
			v.stack = v.stack[:len(v.stack)-1]
			i++
		default:
			return false
		}
	}
}

func hasAt(b []byte, i int, lit string) bool {
	return len(b)-i >= len(lit) && string(b[i:i+len(lit)]) == lit
}

// key checks `"key" :` at b[i] and returns the index of the value after it.
func key(b []byte, i int) (int, bool) {
	if i >= len(b) || b[i] != '"' {
		return i, false
	}
	i, _, ok := jsonlex.String(b, i)
	if !ok {
		return i, false
	}
	i = skipSpace(b, i)
	if i >= len(b) || b[i] != ':' {
		return i, false
	}
	return skipSpace(b, i+1), true
}
