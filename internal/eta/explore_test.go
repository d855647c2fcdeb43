package eta

import (
	"os"
	"testing"
)

func TestExplore(t *testing.T) {
	if os.Getenv("ETA_EXPLORE") == "" {
		t.Skip()
	}
	for _, c := range simCases() {
		if n := os.Getenv("ETA_CASE"); n != "" && n != c.Name {
			continue
		}
		cps := Simulate(c)
		t.Logf("%s\n%s", c.Name, Table(cps))
	}
}

func TestExploreTokens(t *testing.T) {
	if os.Getenv("ETA_EXPLORE") == "" {
		t.Skip()
	}
	for _, c := range simCases() {
		if n := os.Getenv("ETA_CASE"); n != "" && n != c.Name {
			continue
		}
		for _, cp := range Simulate(c) {
			t.Logf("%s %.2f tokens est %.4g true %.4g (%+.1f%%)", c.Name, cp.Progress, cp.Result.RemainingTokens, cp.TrueRemainingTokens, 100*(cp.Result.RemainingTokens/cp.TrueRemainingTokens-1))
		}
	}
}
