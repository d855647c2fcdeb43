package eta

import "math"

// lognormal is a fitted lognormal distribution of natural (uncapped) output
// lengths, with the covariance of its parameters.
type lognormal struct {
	mu, sigma float64
	// cov is the inverse observed information of (mu, sigma):
	// [var(mu), cov(mu,sigma), var(sigma)].
	cov [3]float64
	ok  bool
}

// fitSample is one group of observations on the log scale (y = ln length).
// Exact observations carry their sums; censored ones a representative y.
type fitSample struct {
	n        float64 // count
	sy, syy  float64 // exact: sum of y and y²
	censored bool    // right-censored at y = sy/n
}

const (
	sqrt2   = math.Sqrt2
	sqrt2Pi = 2.5066282746310002
	// Weak prior on ln σ (normal, centred at ln 1, sd priorSD): worth about
	// one observation; it only matters while there are almost no data.
	priorSD = 1.0
)

// normQ is the upper tail of the standard normal, P(Z > z).
func normQ(z float64) float64 { return 0.5 * math.Erfc(z/sqrt2) }

// logNormQ is ln P(Z > z), accurate in the far upper tail.
func logNormQ(z float64) float64 {
	if z < 30 {
		return math.Log(normQ(z))
	}
	return -z*z/2 - math.Log(z*sqrt2Pi) + math.Log1p(-1/(z*z))
}

// mills is the inverse Mills ratio φ(z)/Q(z), stable in the upper tail.
func mills(z float64) float64 {
	if z > 8 {
		// Asymptotic expansion; relative error < 1e-6 here.
		z2 := z * z
		return z / (1 - 1/z2 + 3/(z2*z2) - 15/(z2*z2*z2))
	}
	q := normQ(z)
	if q <= 0 {
		return z
	}
	return math.Exp(-z*z/2) / sqrt2Pi / q
}

// fitLognormal maximises the censored lognormal likelihood (with the weak
// prior on ln σ) by Newton's method on (μ, σ). Bounded: at most 60 steps.
func fitLognormal(samples []fitSample, mu0, sigma0 float64) lognormal {
	var nExact float64
	for _, s := range samples {
		if !s.censored {
			nExact += s.n
		}
	}
	if nExact < 2 {
		return lognormal{}
	}
	mu, sigma := mu0, sigma0
	if !(sigma > 0.05) || sigma > 5 {
		sigma = 1
	}
	ll, g, h := logLik(samples, mu, sigma)
	for it := 0; it < 60; it++ {
		// Newton step on the negative definite Hessian; fall back to a
		// scaled gradient step when it is not.
		det := h[0]*h[2] - h[1]*h[1]
		var dmu, dsig float64
		if h[0] < 0 && det > 0 {
			dmu = -(h[2]*g[0] - h[1]*g[1]) / det
			dsig = -(-h[1]*g[0] + h[0]*g[1]) / det
		} else {
			scale := sigma * sigma / (nExact + 1)
			dmu, dsig = g[0]*scale, g[1]*scale
		}
		// Keep steps modest on the log scale.
		if a := math.Abs(dmu); a > 1 {
			dmu, dsig = dmu/a, dsig/a
		}
		if dsig < -sigma/2 {
			f := (-sigma / 2) / dsig
			dmu, dsig = dmu*f, dsig*f
		}
		if dsig > sigma {
			f := sigma / dsig
			dmu, dsig = dmu*f, dsig*f
		}
		step := 1.0
		improved := false
		for k := 0; k < 20; k++ {
			nmu, nsig := mu+step*dmu, sigma+step*dsig
			if nsig < 0.02 {
				nsig = 0.02
			}
			nll, ng, nh := logLik(samples, nmu, nsig)
			if nll >= ll-1e-12 {
				converged := math.Abs(nmu-mu) < 1e-7 && math.Abs(nsig-sigma) < 1e-7
				mu, sigma, ll, g, h = nmu, nsig, nll, ng, nh
				improved = true
				if converged {
					it = 60
				}
				break
			}
			step /= 2
		}
		if !improved {
			break
		}
	}
	det := h[0]*h[2] - h[1]*h[1]
	out := lognormal{mu: mu, sigma: sigma, ok: true}
	if h[0] < 0 && det > 0 {
		// Covariance = (−H)⁻¹.
		out.cov = [3]float64{-h[2] / det, h[1] / det, -h[0] / det}
	} else {
		out.cov = [3]float64{1, 0, 1}
	}
	return out
}

// logLik returns the log-likelihood of the samples, its gradient and
// Hessian ([μμ, μσ, σσ]) in (μ, σ).
func logLik(samples []fitSample, mu, sigma float64) (float64, [2]float64, [3]float64) {
	var ll float64
	var g [2]float64
	var h [3]float64
	s2 := sigma * sigma
	for _, s := range samples {
		if s.n == 0 {
			continue
		}
		if !s.censored {
			// Σ over exact y of −ln σ − (y−μ)²/(2σ²).
			sz := (s.sy - s.n*mu) / sigma               // Σ z
			szz := (s.syy - 2*mu*s.sy + s.n*mu*mu) / s2 // Σ z²
			ll += -s.n*math.Log(sigma) - szz/2
			g[0] += sz / sigma
			g[1] += (-s.n + szz) / sigma
			h[0] += -s.n / s2
			h[1] += -2 * sz / s2
			h[2] += (s.n - 3*szz) / s2
			continue
		}
		z := (s.sy/s.n - mu) / sigma
		m := mills(z)
		dm := m * (m - z)
		ll += s.n * logNormQ(z)
		g[0] += s.n * m / sigma
		g[1] += s.n * m * z / sigma
		h[0] += -s.n * dm / s2
		h[1] += -s.n * (dm*z + m) / s2
		h[2] += -s.n * (dm*z*z + 2*m*z) / s2
	}
	// Prior on ln σ: −(ln σ)²/(2 sd²).
	ls := math.Log(sigma)
	ll += -ls * ls / (2 * priorSD * priorSD)
	g[1] += -ls / (sigma * priorSD * priorSD)
	h[2] += (ls - 1) / (s2 * priorSD * priorSD)
	return ll, g, h
}

// survival is P(L > x) under the fitted (uncapped) lognormal.
func (f lognormal) survival(x float64) float64 {
	if x <= 0 {
		return 1
	}
	return normQ((math.Log(x) - f.mu) / f.sigma)
}

// fitMu fits μ of a censored lognormal with σ held fixed (the profile
// likelihood): Newton in one dimension, from mu0. It returns ok false
// without two exact observations.
func fitMu(samples []fitSample, mu0, sigma float64) lognormal {
	var nExact float64
	for _, s := range samples {
		if !s.censored {
			nExact += s.n
		}
	}
	if nExact < 2 || !(sigma > 0) {
		return lognormal{}
	}
	mu := mu0
	ll, g, h := logLik(samples, mu, sigma)
	for it := 0; it < 60; it++ {
		d := g[0] * sigma * sigma / (nExact + 1)
		if h[0] < 0 {
			d = -g[0] / h[0]
		}
		d = math.Max(-1, math.Min(1, d))
		improved := false
		for k, step := 0, 1.0; k < 20; k, step = k+1, step/2 {
			nll, ng, nh := logLik(samples, mu+step*d, sigma)
			if nll >= ll-1e-12 {
				mu, ll, g, h = mu+step*d, nll, ng, nh
				improved = true
				break
			}
		}
		if !improved || math.Abs(d) < 1e-7 {
			break
		}
	}
	out := lognormal{mu: mu, sigma: sigma, ok: true, cov: [3]float64{1, 0, 0}}
	if h[0] < 0 {
		out.cov[0] = -1 / h[0]
	}
	return out
}
