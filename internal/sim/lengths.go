package sim

import (
	"hash/fnv"
	"math"
	"strings"
)

// lengthModel draws each prompt's output length deterministically from a
// lognormal distribution: hash(prompt text, seed) → (length, reasoning share).
type lengthModel struct {
	seed      int64
	mean      float64 // mean output tokens with thinking on
	sigma     float64 // lognormal sigma
	meanPlain float64 // mean output tokens with thinking off
}

// outputPlan is how many tokens a prompt generates if nothing stops it.
type outputPlan struct {
	total     int // natural output length, ≥ 1
	reasoning int // leading reasoning tokens (0 when thinking is off)
}

func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// unit maps a 64-bit value to (0, 1).
func unit(x uint64) float64 { return (float64(x>>11) + 0.5) / (1 << 53) }

func (m lengthModel) plan(text string, thinking bool) outputPlan {
	h := fnv.New64a()
	_, _ = h.Write([]byte(text)) // hash.Hash never fails
	x := splitmix64(h.Sum64() ^ splitmix64(uint64(m.seed)))
	y := splitmix64(x)
	z := splitmix64(y)
	mean := m.meanPlain
	if thinking {
		mean = m.mean
	}
	mu := math.Log(mean) - m.sigma*m.sigma/2
	normal := math.Sqrt(-2*math.Log(unit(x))) * math.Cos(2*math.Pi*unit(y))
	l := math.Round(math.Exp(mu + m.sigma*normal))
	total := 1
	if l > 1 {
		total = int(math.Min(l, 1<<30))
	}
	p := outputPlan{total: total}
	if thinking && total > 1 {
		share := 0.6 + 0.3*unit(z) // 60–90 % of the output is reasoning
		p.reasoning = int(math.Round(float64(total) * share))
		p.reasoning = min(max(p.reasoning, 1), total-1)
	}
	return p
}

// promptTokens is the simulated tokenizer: about 4 bytes per token, at least 1.
func promptTokens(text string) int { return max(1, len(text)/4) }

// bytesPerToken is the size of the generated filler text per token.
const bytesPerToken = 4

// filler produces cheap, realistic-size output text: slices of a long
// repeating pattern, 4 bytes per token, so a token range maps to a byte range.
type filler struct {
	reasoning string
	content   string
}

func newFiller() filler {
	return filler{
		reasoning: strings.Repeat("Let me think this through step by step and check each part of the question before I answer. ", 48),
		content:   strings.Repeat("Here is the answer with the key points first, then the details that support each one. ", 48),
	}
}

// appendText appends the bytes [from, to) of the infinite repetition of pattern.
func appendText(dst []byte, pattern string, from, to int64) []byte {
	n := int64(len(pattern))
	for off := from; off < to; {
		i := off % n
		k := min(n-i, to-off)
		dst = append(dst, pattern[i:i+k]...)
		off += k
	}
	return dst
}

// text returns the text of tokens [from, to) of one field, keeping only bytes
// below capBytes (capBytes < 0: no cap).
func (f filler) text(reasoning bool, from, to int, capBytes int) string {
	lo, hi := int64(from)*bytesPerToken, int64(to)*bytesPerToken
	if capBytes >= 0 {
		hi = min(hi, int64(capBytes))
	}
	if hi <= lo {
		return ""
	}
	p := f.content
	if reasoning {
		p = f.reasoning
	}
	return string(appendText(make([]byte, 0, hi-lo), p, lo, hi))
}
