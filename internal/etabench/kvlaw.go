package main

import (
	"fmt"
	"io"
	"math"

	"github.com/gend-dev/gend/internal/sim"
)

// printKVLaw checks the bound's premise on gensim's own scheduler (sim.Bench,
// virtual time, one server, a closed loop of 1,024 clients: more than the KV
// cache holds): for output-length shapes of the same mean, the throughput
// should be inversely proportional to the running requests' mean context,
// P + E[L²]/(2E[L]), not to the mean length. (Equal lengths are left out:
// requests started together end together, the running set's ages never mix
// and its mean context is not E[L²]/(2E[L]).)
func printKVLaw(w io.Writer, mean float64, maxTokens int) error {
	rows, err := kvLaw(mean, maxTokens)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "KV law on gensim's scheduler (sim.Bench: 1 server, 1,024 clients, virtual time; mean %.0f, max_tokens %d):\n\n", mean, maxTokens)
	fmt.Fprintln(w, "Throughput relative to the first row: measured, and predicted by the KV law (÷ mean context); a slot-bound fleet would run all at 1.000.")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "| shape | E[L²]/(2E[L]) | tok/s | running | measured | KV law |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|")
	for _, r := range rows {
		fmt.Fprintf(w, "| %s | %.0f | %.0f | %.0f | %.3f | %.3f |\n", r.shape, r.halfMoment, r.tokensPerSec, r.running, r.measured, r.predicted)
	}
	return nil
}

// kvLawRow is one shape's line of the KV-law check.
type kvLawRow struct {
	shape                 string
	halfMoment            float64 // E[L²]/(2E[L]) of the capped lengths
	tokensPerSec, running float64 // sim.Bench's measurement
	measured, predicted   float64 // throughput relative to the first row
}

// kvLaw runs the check for shapes of output mean mean.
func kvLaw(mean float64, maxTokens int) ([]kvLawRow, error) {
	shapes := []struct {
		name, dist string
		sigma      float64
	}{
		{"lognormal σ 0.5", "", 0.5},
		{"gamma k 2", "gamma:2", 1},
		{"lognormal σ 1.0", "", 1.0},
		{"Weibull k 0.8", "weibull:0.8", 1},
		{"lognormal σ 1.5", "", 1.5},
		{"Pareto α 2.5", "pareto:2.5", 1},
	}
	const benchPrompt = 175 // sim.Bench's prompts: 200–1,200 bytes, ~4 bytes a token
	prompts := make([]string, 400_000)
	for i := range prompts {
		prompts[i] = fmt.Sprintf("kv law %d", i)
	}
	var out []kvLawRow
	var baseCtx, baseTok float64
	for i, s := range shapes {
		sc := sim.ServerConfig{OutputMean: mean, OutputSigma: s.sigma, OutputDist: s.dist}
		ls, err := sim.OutputLengths(sc, -2, prompts)
		if err != nil {
			return nil, err
		}
		var m1, m2 float64
		for _, l := range ls {
			x := math.Min(float64(l), float64(maxTokens))
			m1 += x
			m2 += x * x
		}
		half := m2 / (2 * m1)
		rows, err := sim.Bench(sim.BenchConfig{Server: sc, Concurrency: []int{1024}, MaxTokens: maxTokens, Thinking: true, Seed: 1})
		if err != nil {
			return nil, err
		}
		r := rows[0]
		ctx := benchPrompt + half
		if i == 0 {
			baseCtx, baseTok = ctx, r.TokensPerSec
		}
		out = append(out, kvLawRow{shape: s.name, halfMoment: half, tokensPerSec: r.TokensPerSec, running: r.AvgRunning,
			measured: r.TokensPerSec / baseTok, predicted: baseCtx / ctx})
	}
	return out, nil
}
