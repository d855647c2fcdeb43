// Package jsonlex checks single JSON tokens in place, without allocating:
// the shared lexer of gend's two hand-written JSON scanners (input lines in
// internal/input, response bodies in internal/backend).
package jsonlex

// String checks the string starting at b[i] == '"' and returns the index
// after its closing quote. plain says it has no escapes and only ASCII
// bytes, so its raw content b[i+1:end-1] is its value.
func String(b []byte, i int) (end int, plain, ok bool) {
	if i >= len(b) || b[i] != '"' {
		return i, false, false
	}
	i++
	plain = true
	var or byte // every plain byte ORed: ≥ 0x80 when one is not ASCII
	for i < len(b) {
		c := b[i]
		if c >= 0x20 && c != '"' && c != '\\' {
			or |= c
			i++
			continue
		}
		switch c {
		case '"':
			return i + 1, plain && or < 0x80, true
		case '\\':
			plain = false
			if i+1 >= len(b) {
				return i, false, false
			}
			switch b[i+1] {
			case '"', '\\', '/', 'b', 'f', 'n', 'r', 't':
				i += 2
			case 'u':
				if len(b)-i < 6 || !isHex(b[i+2]) || !isHex(b[i+3]) || !isHex(b[i+4]) || !isHex(b[i+5]) {
					return i, false, false
				}
				i += 6
			default:
				return i, false, false
			}
		default: // a control byte
			return i, false, false
		}
	}
	return i, false, false
}

// Number checks the number starting at b[i] and returns the index after
// it. integer says it is -?digits only (no fraction, no exponent).
func Number(b []byte, i int) (end int, integer, ok bool) {
	if i < len(b) && b[i] == '-' {
		i++
	}
	switch {
	case i < len(b) && b[i] == '0':
		i++
	case i < len(b) && b[i] >= '1' && b[i] <= '9':
		i = digits(b, i)
	default:
		return i, false, false
	}
	integer = true
	if i < len(b) && b[i] == '.' {
		integer = false
		if i+1 >= len(b) || !isDigit(b[i+1]) {
			return i, false, false
		}
		i = digits(b, i+1)
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		integer = false
		i++
		if i < len(b) && (b[i] == '+' || b[i] == '-') {
			i++
		}
		if i >= len(b) || !isDigit(b[i]) {
			return i, false, false
		}
		i = digits(b, i)
	}
	return i, integer, true
}

func digits(b []byte, i int) int {
	for i < len(b) && isDigit(b[i]) {
		i++
	}
	return i
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

func isHex(c byte) bool {
	return isDigit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F')
}
