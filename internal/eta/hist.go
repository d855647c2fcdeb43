package eta

import "math"

// numBins is the number of log-spaced length bins. With a cap of 32k tokens
// a bin is ~5 % wide; memory is constant whatever the number of requests.
const numBins = 200

// uncappedMax is the length range used when the job's cap is unknown.
const uncappedMax = 1 << 21

// bins is a log-spaced histogram of lengths in [0, max]. Bin j covers
// [edge(j), edge(j+1)); edge(0) = 0 and edge(j) = max^(j/numBins) for j ≥ 1.
type bins struct {
	max     float64
	logMax  float64
	edges   [numBins + 1]float64
	centers [numBins]float64
}

func newBins(max float64) bins {
	b := bins{max: max, logMax: math.Log(max)}
	for j := 1; j <= numBins; j++ {
		b.edges[j] = math.Exp(b.logMax * float64(j) / numBins)
	}
	b.edges[numBins] = max
	for j := 0; j < numBins; j++ {
		b.centers[j] = (b.edges[j] + b.edges[j+1]) / 2
	}
	return b
}

// index is the bin holding length x.
func (b *bins) index(x float64) int {
	if x < b.edges[1] {
		return 0
	}
	j := int(math.Log(x) / b.logMax * numBins)
	if j >= numBins {
		return numBins - 1
	}
	// Guard against rounding at the edges.
	for j > 0 && x < b.edges[j] {
		j--
	}
	for j < numBins-1 && x >= b.edges[j+1] {
		j++
	}
	return j
}

// lengthBin accumulates finished requests in one bin.
type lengthBin struct {
	n       int64   // finished by a stop (EOS, stop string): exact natural lengths
	sy, syy float64 // Σ ln x, Σ (ln x)² of those
	sx      float64 // Σ x
	lenN    int64   // finished by the length cap: natural length ≥ x
	lenSY   float64 // Σ ln x of those
	lenSX   float64
}

// logLen is ln x with lengths below one token treated as half a token.
func logLen(x float64) float64 { return math.Log(math.Max(x, 0.5)) }
