package main

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"

	"github.com/gend-dev/gend/internal/sim"
)

// The bound (-bound): how well can *any* estimator know a job's remaining
// time at a checkpoint, given only the output lengths of the requests
// started by then?
//
// On a KV-bound fleet (long outputs: the batch is capped by the KV cache,
// not by request slots) a decode step reads the weights and a full cache,
// so its time is about constant, and the batch is cache ÷ mean context. A
// request of output L holds prompt + a tokens at age a, so the running
// set's mean context is (P·E[L] + E[L²]/2) ÷ E[L], and the time to run a
// set of requests is proportional to Σ (P·L + L²/2): the second moment of
// the lengths, not their sum, decides it. (On a slot-bound fleet the time
// is proportional to Σ L.) That is gensim's roofline (docs/gensim.md) and
// SGLang's memory-bound decode; docs/eta.md, "KV-bound batches".
//
// For many jobs of the bench's prompts, their lengths drawn from gensim's
// own length model at seeds 1, 2, … (sim.OutputLengths; the first are the
// bench's own jobs)
// the bound compares, at each checkpoint p, the remaining requests' true
// Σ (P·L + L²/2) with three predictions made from the first k = p·n +
// running requests, every one of them *fully* observed (gend sees the
// running ones only up to their age, so it knows less):
//
//   - exact: the length distribution known exactly (error: only the
//     remaining requests' own randomness);
//   - lognormal, σ known: the family and σ known, μ fitted (maximum
//     likelihood on the natural lengths) — only for lognormal jobs;
//   - sample: the sample moments of the first k (no family assumed: the
//     case of a job whose length distribution is not known in advance).
//
// It prints each one's 5–95 % range of errors and the share of jobs it
// misses the targets in (|error| ≤ 10 % before 10 % progress, ≤ 5 %
// from 10 % on), beside the sample moments on a slot-bound fleet (Σ L).
// The drain (the last requests running alone) is left out: it adds error.

// boundPromptTokens is the bench prompts' token count (gensim: ~4 bytes a
// token); it barely matters next to E[L²]/(2E[L]) ≈ 2,000.
const boundPromptTokens = 16

// boundRunning is about how many requests are in flight in the bench's
// fleet (2 servers; a recorded σ 1.0 job: 283 at 1 %, 199 at 2 %, 153–182
// from 5 % on). More started requests only help the estimators.
const boundRunning = 180

// boundOwnJobs is how many of the first jobs are listed one by one (the
// bench's seeds 1–3).
const boundOwnJobs = 3

// boundStats accumulates one estimator's relative errors at one checkpoint.
type boundStats []float64

func (b boundStats) summary(target float64) string {
	if len(b) == 0 {
		return "—"
	}
	s := append([]float64(nil), b...)
	sort.Float64s(s)
	miss := 0
	for _, e := range s {
		if math.Abs(e) > target {
			miss++
		}
	}
	q := func(p float64) float64 { return 100 * s[int(math.Round(p*float64(len(s)-1)))] }
	return fmt.Sprintf("[%+5.1f, %+5.1f] %5.1f %%", q(0.05), q(0.95), 100*float64(miss)/float64(len(s)))
}

// Estimators compared by the bound, in column order.
const (
	estSlot   = iota // slot-bound fleet, sample moments of Σ L
	estExact         // KV-bound, the distribution known
	estLogn          // KV-bound, lognormal with σ known (lognormal jobs)
	estSample        // KV-bound, sample moments
	numEst
)

// boundCheckpoints are the bench's checkpoints.
var boundCheckpoints = []float64{0.01, 0.02, 0.05, 0.10, 0.25, 0.50, 0.75}

// bound is the result of computeBound.
type bound struct {
	jobs      int
	lognormal bool                 // estLogn was computed
	errs      [numEst][]boundStats // [estimator][checkpoint] relative errors, one per job
	allOK     [numEst]int          // jobs meeting every target from 2 % on
	own       [][]float64          // [job][checkpoint] estSample's error, the first boundOwnJobs jobs
}

// computeBound draws jobs jobs of cfg.n requests (the bench's prompts) at
// seeds cfg.seed … and scores the estimators described above.
func computeBound(cfg config, jobs int) (bound, error) {
	sc := sim.ServerConfig{OutputMean: cfg.mean, OutputSigma: cfg.sigma, OutputDist: cfg.dist, OutputRunaway: cfg.runaway}
	capT := float64(cfg.maxTokens)
	P := float64(boundPromptTokens)
	clip := func(l int) float64 { return math.Min(float64(l), capT) }
	cost := func(l float64) float64 { return P*l + l*l/2 }
	b := bound{jobs: jobs, lognormal: (cfg.dist == "" || cfg.dist == "lognormal") && cfg.runaway == 0}
	cps := boundCheckpoints
	for e := range b.errs {
		b.errs[e] = make([]boundStats, len(cps))
	}

	// The population: one large sample at a seed no job uses.
	popPrompts := make([]string, 2_000_000)
	for i := range popPrompts {
		popPrompts[i] = fmt.Sprintf("population %d", i)
	}
	pop, err := sim.OutputLengths(sc, -1, popPrompts)
	if err != nil {
		return b, err
	}
	var popCost float64
	for _, l := range pop {
		popCost += cost(clip(l))
	}
	popCost /= float64(len(pop))

	prompts := make([]string, cfg.n)
	for i := range prompts {
		prompts[i] = benchPrompt(i)
	}
	for j := range jobs {
		ls, err := sim.OutputLengths(sc, cfg.seed+int64(j), prompts)
		if err != nil {
			return b, err
		}
		// Suffix sums of the true remaining work.
		restCost := make([]float64, len(ls)+1)
		restTok := make([]float64, len(ls)+1)
		for i := len(ls) - 1; i >= 0; i-- {
			l := clip(ls[i])
			restCost[i] = restCost[i+1] + cost(l)
			restTok[i] = restTok[i+1] + l
		}
		jobOK := [numEst]bool{true, true, b.lognormal, true}
		var own []float64
		for ci, p := range cps {
			k := min(len(ls)-1, int(p*float64(len(ls)))+boundRunning)
			m := float64(len(ls) - k)
			var errs [numEst]float64
			errs[estSlot] = m*(restTok[0]-restTok[k])/float64(k)/restTok[k] - 1
			errs[estExact] = m*popCost/restCost[k] - 1
			errs[estSample] = m*(restCost[0]-restCost[k])/float64(k)/restCost[k] - 1
			if b.lognormal {
				var mu float64
				for _, l := range ls[:k] {
					mu += math.Log(float64(l))
				}
				mu /= float64(k)
				c1, c2 := cappedLognormal(mu, cfg.sigma, capT)
				errs[estLogn] = m*(P*c1+c2/2)/restCost[k] - 1
			}
			own = append(own, errs[estSample])
			for e := range numEst {
				if e == estLogn && !b.lognormal {
					continue
				}
				b.errs[e][ci] = append(b.errs[e][ci], errs[e])
				if p >= 0.02 && math.Abs(errs[e]) > boundTarget(p) {
					jobOK[e] = false
				}
			}
		}
		if j < boundOwnJobs {
			b.own = append(b.own, own)
		}
		for e, ok := range jobOK {
			if ok {
				b.allOK[e]++
			}
		}
	}
	return b, nil
}

// printBound prints computeBound's tables for cfg.
func printBound(w io.Writer, cfg config, jobs int) error {
	b, err := computeBound(cfg, jobs)
	if err != nil {
		return err
	}
	cps := boundCheckpoints
	fmt.Fprintf(w, "ETA bound: %d jobs of %d requests (gensim lengths: %s, max_tokens %d, seeds %d…%d), %d running, prompt %d tokens.\n",
		jobs, cfg.n, cfg.lengths(), cfg.maxTokens, cfg.seed, cfg.seed+int64(jobs)-1, boundRunning, boundPromptTokens)
	fmt.Fprintln(w, "Error of the remaining work predicted from the requests started by a checkpoint, all fully observed:")
	fmt.Fprintln(w, "5–95 % range of the error, and the share of jobs beyond the target (10 % before 10 % progress, 5 % after).")
	fmt.Fprintln(w)
	fmt.Fprintf(w, "| progress | target | slot-bound, sample moments | KV-bound, distribution known | KV-bound, lognormal σ known | KV-bound, sample moments |\n")
	fmt.Fprintf(w, "|---|---|---|---|---|---|\n")
	for ci, p := range cps {
		target := boundTarget(p)
		fmt.Fprintf(w, "| %.0f %% | ±%.0f %% |", 100*p, 100*target)
		for e := range numEst {
			fmt.Fprintf(w, " %s |", b.errs[e][ci].summary(target))
		}
		fmt.Fprintln(w)
	}
	fmt.Fprint(w, "| jobs meeting every target from 2 % on | |")
	for e := range numEst {
		if e == estLogn && !b.lognormal {
			fmt.Fprint(w, " — |")
			continue
		}
		fmt.Fprintf(w, " %.1f %% |", 100*float64(b.allOK[e])/float64(jobs))
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w)
	fmt.Fprintln(w, "The bench's own jobs (its prompts, seeds below): the KV-bound sample moments' error, fully observed.")
	fmt.Fprintln(w)
	fmt.Fprint(w, "| seed |")
	for _, p := range cps {
		fmt.Fprintf(w, " %.0f %% |", 100*p)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "|---|"+strings.Repeat("---|", len(cps)))
	for j, errs := range b.own {
		fmt.Fprintf(w, "| %d |", cfg.seed+int64(j))
		for _, e := range errs {
			fmt.Fprintf(w, " %+.1f |", 100*e)
		}
		fmt.Fprintln(w)
	}
	return nil
}

// boundTarget is the error target at progress p.
func boundTarget(p float64) float64 {
	if p >= 0.10 {
		return 0.05
	}
	return 0.10
}

// cappedLognormal is E[min(L, c)] and E[min(L, c)²] for ln L ~ N(mu, sigma²).
func cappedLognormal(mu, sigma, c float64) (float64, float64) {
	var e1, e2 float64
	const dz = 0.002
	for z := -8.0; z < 8; z += dz {
		w := math.Exp(-z*z/2) / math.Sqrt(2*math.Pi) * dz
		l := math.Min(math.Exp(mu+sigma*z), c)
		e1 += w * l
		e2 += w * l * l
	}
	return e1, e2
}
