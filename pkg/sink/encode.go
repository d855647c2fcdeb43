package sink

import (
	"bytes"
	"encoding/json"
	"strconv"
	"unicode/utf8"
)

// appendRecordID appends the JSON string "<jobID>-<line>".
func appendRecordID(dst []byte, jobID string, line int64) []byte {
	dst = append(dst, '"')
	dst = appendEscaped(dst, jobID)
	dst = append(dst, '-')
	dst = strconv.AppendInt(dst, line, 10)
	return append(dst, '"')
}

// appendResult appends one shard line (with its trailing newline) in the
// OpenAI Batch output format.
func appendResult(dst []byte, jobID string, r *Result) []byte {
	dst = append(dst, `{"id":`...)
	dst = appendRecordID(dst, jobID, r.Line)
	dst = append(dst, `,"custom_id":`...)
	dst = appendJSONString(dst, r.CustomID)
	dst = append(dst, `,"response":{"status_code":`...)
	dst = strconv.AppendInt(dst, int64(r.Status), 10)
	dst = append(dst, `,"request_id":`...)
	dst = appendJSONString(dst, r.RequestID)
	dst = append(dst, `,"body":`...)
	if r.BodyIsJSON && len(r.Body) > 0 {
		dst = appendTrustedBody(dst, r.Body)
	} else {
		dst = appendBody(dst, r.Body)
	}
	dst = append(dst, `},"error":null}`...)
	return append(dst, '\n')
}

// appendFailure appends one errors.jsonl line (with its trailing newline).
func appendFailure(dst []byte, jobID string, f *Failure) []byte {
	dst = append(dst, `{"id":`...)
	dst = appendRecordID(dst, jobID, f.Line)
	dst = append(dst, `,"custom_id":`...)
	if f.CustomID == "" {
		dst = append(dst, "null"...)
	} else {
		dst = appendJSONString(dst, f.CustomID)
	}
	dst = append(dst, `,"response":`...)
	if f.Status == 0 {
		dst = append(dst, "null"...)
	} else {
		dst = append(dst, `{"status_code":`...)
		dst = strconv.AppendInt(dst, int64(f.Status), 10)
		dst = append(dst, `,"request_id":`...)
		dst = appendJSONString(dst, f.RequestID)
		dst = append(dst, `,"body":`...)
		dst = appendBody(dst, f.Body)
		dst = append(dst, '}')
	}
	dst = append(dst, `,"error":{"code":`...)
	dst = appendJSONString(dst, f.Code)
	dst = append(dst, `,"message":`...)
	dst = appendJSONString(dst, f.Message)
	dst = append(dst, `,"line":`...)
	dst = strconv.AppendInt(dst, f.Line, 10)
	dst = append(dst, "}}\n"...)
	return dst
}

// appendBody appends a server body: verbatim when it is one valid JSON value
// on one line, compacted when it is valid JSON spread over several lines
// (only insignificant whitespace changes), and as a JSON string otherwise,
// so that a shard line is always one valid JSON object.
func appendBody(dst []byte, body []byte) []byte {
	if len(body) == 0 {
		return append(dst, `""`...)
	}
	if !json.Valid(body) {
		return appendJSONString(dst, string(body))
	}
	if bytes.IndexByte(body, '\n') < 0 && bytes.IndexByte(body, '\r') < 0 {
		return append(dst, body...)
	}
	buf := bytes.NewBuffer(dst)
	if err := json.Compact(buf, body); err != nil {
		// Unreachable: body is valid JSON.
		return appendJSONString(dst, string(body))
	}
	return buf.Bytes()
}

// appendTrustedBody appends a body known to be valid JSON: verbatim, or
// compacted when it spans lines.
func appendTrustedBody(dst []byte, body []byte) []byte {
	if bytes.IndexByte(body, '\n') < 0 && bytes.IndexByte(body, '\r') < 0 {
		return append(dst, body...)
	}
	return appendBody(dst, body)
}

// appendJSONString appends s as a JSON string. Invalid UTF-8 becomes U+FFFD,
// like encoding/json does.
func appendJSONString(dst []byte, s string) []byte {
	dst = append(dst, '"')
	dst = appendEscaped(dst, s)
	return append(dst, '"')
}

const hexDigits = "0123456789abcdef"

func appendEscaped(dst []byte, s string) []byte {
	start := 0
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c >= 0x20 && c != '"' && c != '\\' {
				i++
				continue
			}
			dst = append(dst, s[start:i]...)
			switch c {
			case '"', '\\':
				dst = append(dst, '\\', c)
			case '\n':
				dst = append(dst, '\\', 'n')
			case '\r':
				dst = append(dst, '\\', 'r')
			case '\t':
				dst = append(dst, '\\', 't')
			default:
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			}
			i++
			start = i
			continue
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			dst = append(dst, s[start:i]...)
			dst = append(dst, `\ufffd`...)
			i += size
			start = i
			continue
		}
		if r == '\u2028' || r == '\u2029' {
			dst = append(dst, s[start:i]...)
			dst = append(dst, '\\', 'u', '2', '0', '2', hexDigits[r&0xf])
			i += size
			start = i
			continue
		}
		i += size
	}
	return append(dst, s[start:]...)
}
