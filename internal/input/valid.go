package input

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
				if i, ok = str(b, i); !ok {
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
				if i, ok = number(b, i); !ok {
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
	i, ok := str(b, i)
	if !ok {
		return i, false
	}
	i = skipSpace(b, i)
	if i >= len(b) || b[i] != ':' {
		return i, false
	}
	return skipSpace(b, i+1), true
}

// str checks the string at b[i]=='"' and returns the index after it.
func str(b []byte, i int) (int, bool) {
	i++
	for i < len(b) {
		c := b[i]
		switch {
		case c == '"':
			return i + 1, true
		case c == '\\':
			if i+1 >= len(b) {
				return i, false
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if len(b)-i < 6 || !isHex(b[i+2]) || !isHex(b[i+3]) || !isHex(b[i+4]) || !isHex(b[i+5]) {
					return i, false
				}
				i += 6
			default:
				return i, false
			}
		case c < 0x20:
			return i, false
		default:
			i++
		}
	}
	return i, false
}

func isHex(c byte) bool {
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// number checks a JSON number at b[i] and returns the index after it.
func number(b []byte, i int) (int, bool) {
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	default:
		return i, false
	}
	if i < len(b) && b[i] == '.' {
		i++
		if i >= len(b) || !isDigit(b[i]) {
			return i, false
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || !isDigit(b[i]) {
			return i, false
		}
		for i < len(b) && isDigit(b[i]) {
			i++
		}
	}
	return i, true
}
