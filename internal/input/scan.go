package input

import (
	"bytes"
	"encoding/json"
)

// The helpers below walk JSON text that json.Valid has already accepted, so
// they only find boundaries and never report syntax errors. They do not
// allocate.

// isSpace reports JSON insignificant whitespace.
func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r'
}

// trimSpace trims JSON whitespace from both ends.
func trimSpace(b []byte) []byte {
	for len(b) > 0 && isSpace(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && isSpace(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return b
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && isSpace(b[i]) {
		i++
	}
	return i
}

// skipString returns the index just after the string that starts at b[i]=='"'.
func skipString(b []byte, i int) int {
	i++
	for {
		j := bytes.IndexByte(b[i:], '"')
		if j < 0 {
			return len(b)
		}
		i += j
		// Count the backslashes in front of the quote: an odd number escapes it.
		k := i - 1
		for k >= 0 && b[k] == '\\' {
			k--
		}
		i++
		if (i-2-k)%2 == 0 {
			return i
		}
	}
}

// skipValue returns the index just after the value that starts at b[i].
func skipValue(b []byte, i int) int {
	switch b[i] {
	case '"':
		return skipString(b, i)
	case '{', '[':
		depth := 0
		for i < len(b) {
			switch b[i] {
			case '"':
				i = skipString(b, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				depth--
				if depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return len(b)
	default: // number, true, false, null
		for i < len(b) {
			switch b[i] {
			case ',', '}', ']', ' ', '\t', '\n', '\r':
				return i
			}
			i++
		}
		return len(b)
	}
}

// member is one key/value pair of an object: key is unescaped, raw is the
// key as written (quoted), val is the raw JSON value.
type member struct {
	key []byte
	raw []byte
	val []byte
}

// appendMembers appends the members of the valid JSON object obj to dst. A
// key that occurs twice keeps its last value (as encoding/json does) at the
// position of its first occurrence.
func appendMembers(dst []member, obj []byte) []member {
	start := len(dst)
	i := skipSpace(obj, 1) // after '{'
	for i < len(obj) && obj[i] == '"' {
		ke := skipString(obj, i)
		rawKey := obj[i:ke]
		key := obj[i+1 : ke-1]
		if bytes.IndexByte(key, '\\') >= 0 {
			var s string
			if json.Unmarshal(obj[i:ke], &s) == nil {
				key = []byte(s)
			}
		}
		i = skipSpace(obj, ke)
		i = skipSpace(obj, i+1) // after ':'
		ve := skipValue(obj, i)
		val := obj[i:ve]
		replaced := false
		for k := start; k < len(dst); k++ {
			if bytes.Equal(dst[k].key, key) {
				dst[k].val = val
				replaced = true
				break
			}
		}
		if !replaced {
			dst = append(dst, member{key: key, raw: rawKey, val: val})
		}
		i = skipSpace(obj, ve)
		if i < len(obj) && obj[i] == ',' {
			i = skipSpace(obj, i+1)
		}
	}
	return dst
}

// lookup returns the value of key in ms, or nil. A JSON null counts as absent.
func lookup(ms []member, key string) []byte {
	for _, m := range ms {
		if string(m.key) == key {
			if isNull(m.val) {
				return nil
			}
			return m.val
		}
	}
	return nil
}

func isNull(v []byte) bool { return string(v) == "null" }

// forEachElement calls fn for each element of the valid JSON array arr,
// stopping early when fn returns false.
func forEachElement(arr []byte, fn func(i int, v []byte) bool) {
	i := skipSpace(arr, 1)
	for n := 0; i < len(arr) && arr[i] != ']'; n++ {
		e := skipValue(arr, i)
		if !fn(n, arr[i:e]) {
			return
		}
		i = skipSpace(arr, e)
		if i < len(arr) && arr[i] == ',' {
			i = skipSpace(arr, i+1)
		}
	}
}

// kind names a JSON value's type for messages.
func kind(v []byte) string {
	if len(v) == 0 {
		return "nothing"
	}
	switch v[0] {
	case '"':
		return "a string"
	case '{':
		return "an object"
	case '[':
		return "an array"
	case 't', 'f':
		return "a boolean"
	case 'n':
		return "null"
	default:
		return "a number"
	}
}

// appendUnquoted appends the text of the JSON string v to dst.
func appendUnquoted(dst, v []byte) []byte {
	inner := v[1 : len(v)-1]
	if bytes.IndexByte(inner, '\\') < 0 {
		return append(dst, inner...)
	}
	var s string
	if json.Unmarshal(v, &s) != nil {
		return append(dst, inner...)
	}
	return append(dst, s...)
}
