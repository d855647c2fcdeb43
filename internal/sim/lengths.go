package sim

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"strconv"
	"strings"
)

// lengthModel draws each prompt's output length deterministically:
// hash(prompt text, seed) → (length, reasoning share). The family is
// lognormal unless dist says otherwise; a runaway share of prompts never
// stops on its own.
type lengthModel struct {
	seed      int64
	mean      float64 // mean output tokens with thinking on
	sigma     float64 // lognormal sigma (lognormal, and bimodal's long mode)
	meanPlain float64 // mean output tokens with thinking off
	dist      outputDist
	runaway   float64 // share of prompts whose natural length is maxLength
}

// maxLength is the natural length of a prompt that never stops (the cap on
// every drawn length).
const maxLength = 1 << 30

// Output-length families (ServerConfig.OutputDist).
const (
	distLognormal = "lognormal"
	distGamma     = "gamma"
	distWeibull   = "weibull"
	distPareto    = "pareto"
	distBimodal   = "bimodal"
	distUniform   = "uniform"
)

// outputDist is a parsed ServerConfig.OutputDist: the family and its shape
// parameters. The mean comes from the lengthModel, so the same shape serves
// thinking on and off. The zero value is lognormal.
type outputDist struct {
	family string  // "" or distLognormal, distGamma, …
	shape  float64 // gamma and weibull K, pareto A, bimodal P
	short  float64 // bimodal: mean of the short mode with thinking on
	lo, hi int     // uniform: inclusive range
}

// bimodalShortSigma is the lognormal sigma of bimodal's short answers.
const bimodalShortSigma = 0.5

// parseOutputDist parses "family[:param…]"; "" is lognormal.
func parseOutputDist(s string) (outputDist, error) {
	parts := strings.Split(s, ":")
	fam, args := parts[0], parts[1:]
	want := map[string]string{
		"": "", distLognormal: "", distGamma: ":K", distWeibull: ":K", distPareto: ":A",
		distBimodal: ":P:M", distUniform: ":LO:HI",
	}
	form, ok := want[fam]
	if !ok {
		return outputDist{}, errors.New("unknown family (want lognormal, gamma:K, weibull:K, pareto:A, bimodal:P:M or uniform:LO:HI)")
	}
	if len(args) != strings.Count(form, ":") {
		return outputDist{}, fmt.Errorf("want %s%s", or(fam, distLognormal), form)
	}
	d := outputDist{family: fam}
	if fam == "" {
		d.family = distLognormal
	}
	if fam == distUniform {
		lo, err1 := strconv.Atoi(args[0])
		hi, err2 := strconv.Atoi(args[1])
		switch {
		case err1 != nil || err2 != nil:
			return outputDist{}, errors.New("LO and HI must be integers")
		case lo < 1 || hi < lo || hi > maxLength:
			return outputDist{}, fmt.Errorf("want 1 ≤ LO ≤ HI ≤ %d", maxLength)
		}
		d.lo, d.hi = lo, hi
		return d, nil
	}
	num := make([]float64, len(args))
	for i, a := range args {
		v, err := strconv.ParseFloat(a, 64)
		if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
			return outputDist{}, fmt.Errorf("%q is not a number", a)
		}
		num[i] = v
	}
	switch fam {
	case distGamma:
		if num[0] <= 0 {
			return outputDist{}, errors.New("shape must be > 0")
		}
	case distWeibull:
		if num[0] <= 0 {
			return outputDist{}, errors.New("shape must be > 0")
		}
		if math.IsInf(math.Gamma(1+1/num[0]), 0) {
			return outputDist{}, errors.New("shape too small (the scale underflows)")
		}
	case distPareto:
		if num[0] <= 1 {
			return outputDist{}, errors.New("tail index must be > 1 (else the mean is infinite)")
		}
	case distBimodal:
		if num[0] < 0 || num[0] >= 1 {
			return outputDist{}, errors.New("short share P must be in [0, 1)")
		}
		if num[1] <= 0 {
			return outputDist{}, errors.New("short mean M must be > 0")
		}
		d.short = num[1]
	}
	if len(num) > 0 {
		d.shape = num[0]
	}
	return d, nil
}

// bimodalLong is the mean of bimodal's long mode that makes the overall mean
// come out at mean, with the short mode's mean scaled by mean/m.mean (so
// thinking off keeps the shape).
func (m lengthModel) bimodalLong(mean float64) (short, long float64) {
	short = m.dist.short * mean / m.mean
	return short, (mean - m.dist.shape*short) / (1 - m.dist.shape)
}

// check reports a dist that cannot reach the configured means.
func (m lengthModel) check() error {
	if m.dist.family != distBimodal {
		return nil
	}
	if _, long := m.bimodalLong(m.mean); long < 1 {
		return fmt.Errorf("short share × short mean = %v leaves a long-mode mean of %.4g for output_mean %v (must be ≥ 1)",
			m.dist.shape*m.dist.short, long, m.mean)
	}
	return nil
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

// chain continues a prompt's splitmix64 sequence past x, y, z.
type chain struct{ s uint64 }

func (c *chain) uniform() float64 {
	c.s = splitmix64(c.s)
	return unit(c.s)
}

func (c *chain) normal() float64 {
	u, v := c.uniform(), c.uniform()
	return math.Sqrt(-2*math.Log(u)) * math.Cos(2*math.Pi*v)
}

// gammaUnit draws Gamma(k, 1) by Marsaglia–Tsang, starting from the normal
// n and taking further draws from c (k < 1: Gamma(k+1) × U^(1/k)).
func gammaUnit(k, n float64, c *chain) float64 {
	boost := 1.0
	if k < 1 {
		boost = math.Pow(c.uniform(), 1/k)
		k++
	}
	d := k - 1.0/3
	cc := 1 / math.Sqrt(9*d)
	for range 64 { // each try accepts with probability > 0.95
		if v := 1 + cc*n; v > 0 {
			v = v * v * v
			if u := c.uniform(); math.Log(u) < n*n/2+d-d*v+d*math.Log(v) {
				return d * v * boost
			}
		}
		n = c.normal()
	}
	return d * boost // not reached in practice; deterministic all the same
}

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
	normal := math.Sqrt(-2*math.Log(unit(x))) * math.Cos(2*math.Pi*unit(y))
	c := chain{s: z}
	l := math.Inf(1) // runaway: never stops on its own
	if c.uniform() >= m.runaway {
		l = math.Round(m.draw(mean, unit(x), normal, &c))
	}
	total := 1
	if l > 1 {
		total = int(math.Min(l, maxLength))
	}
	p := outputPlan{total: total}
	if thinking && total > 1 {
		share := 0.6 + 0.3*unit(z) // 60–90 % of the output is reasoning
		p.reasoning = int(math.Round(float64(total) * share))
		p.reasoning = min(max(p.reasoning, 1), total-1)
	}
	return p
}

// draw is one length of the family with the given mean, from the uniform u,
// the normal n (both from x, y) and, where the family needs more, c.
func (m lengthModel) draw(mean, u, n float64, c *chain) float64 {
	k := m.dist.shape
	switch m.dist.family {
	case distGamma:
		return gammaUnit(k, n, c) * mean / k
	case distWeibull:
		return mean / math.Gamma(1+1/k) * math.Pow(-math.Log(u), 1/k)
	case distPareto: // Lomax: P(L > l) = (1 + l/λ)^-A, mean λ/(A-1)
		return mean * (k - 1) * (math.Pow(u, -1/k) - 1)
	case distBimodal:
		short, long := m.bimodalLong(mean)
		if c.uniform() < k {
			return lognormal(short, bimodalShortSigma, n)
		}
		return lognormal(long, m.sigma, n)
	case distUniform:
		return float64(min(m.dist.lo+int(u*float64(m.dist.hi-m.dist.lo+1)), m.dist.hi))
	}
	return lognormal(mean, m.sigma, n)
}

// lognormal is exp(mu + sigma·n) with mu set so the mean is mean.
func lognormal(mean, sigma, n float64) float64 {
	mu := math.Log(mean) - sigma*sigma/2
	return math.Exp(mu + sigma*n)
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

// OutputLengths returns the natural output lengths (thinking on) that a
// server configured by c, in a fleet seeded with seed, draws for the given
// prompt texts (a chat request's text is its messages' contents joined by
// newlines; a single user message's is its content): the same draws as a
// running server, for benchmarks that need many jobs' lengths without
// running the jobs (etabench -bound). A runaway prompt's length is 1<<30.
func OutputLengths(c ServerConfig, seed int64, prompts []string) ([]int, error) {
	p, errs := c.resolve(seed)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	out := make([]int, len(prompts))
	for i, text := range prompts {
		out[i] = p.lengths.plan(text, true).total
	}
	return out, nil
}
