package cli

import (
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gend-dev/gend/api"
)

// The table views are pure functions of the API's documents: no clock, no
// terminal size, so golden files pin them.

const barWidth = 30

func newTable(w io.Writer) *tabwriter.Writer {
	return tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
}

// bar renders a progress bar for pct in 0–100.
func bar(pct float64) string {
	if math.IsNaN(pct) || pct < 0 {
		pct = 0
	}
	filled := int(math.Round(math.Min(pct, 100) / 100 * barWidth))
	return "[" + strings.Repeat("█", filled) + strings.Repeat("░", barWidth-filled) + "]"
}

func jobETA(j api.Job) api.ETA {
	p := j.Progress
	p.Status = j.Status
	return api.ProgressETA(j.ID, p)
}

// doneOfTotal is "80,512 / 654,676", with "+" after a total still being
// counted ("?" before the first count).
func doneOfTotal(p api.Progress) string {
	total := api.FormatCount(p.Total)
	if !p.TotalKnown && !api.Terminal(p.Status) {
		if p.Total == 0 {
			total = "?"
		} else {
			total += "+"
		}
	}
	return api.FormatCount(p.Completed) + " / " + total
}

func formatScheduler(s api.SchedulerSpec) string {
	mode := firstNonEmpty(s.Mode, api.ModeAdaptive)
	parts := []string{mode}
	if mode == api.ModeStatic && s.PerServer > 0 {
		parts = append(parts, "per_server "+strconv.Itoa(s.PerServer))
	}
	if s.PerServerMax > 0 {
		parts = append(parts, "per_server_max "+strconv.Itoa(s.PerServerMax))
	}
	if s.TotalMax > 0 {
		parts = append(parts, "total_max "+strconv.Itoa(s.TotalMax))
	}
	return strings.Join(parts, " · ")
}

func pct(ratio float64) string {
	if math.IsNaN(ratio) || math.IsInf(ratio, 0) {
		return "?"
	}
	return strconv.FormatFloat(100*ratio, 'f', 0, 64) + "%"
}

func optPct(ratio *float64) string {
	if ratio == nil {
		return "n/a"
	}
	return pct(*ratio)
}

// formatBytes is a decimal size: "1.2 GB".
func formatBytes(n float64) string {
	const unit = 1000
	if n < unit {
		return strconv.FormatFloat(n, 'f', 0, 64) + " B"
	}
	exp, v := 0, n/unit
	for v >= unit && exp < 5 {
		v /= unit
		exp++
	}
	return fmt.Sprintf("%.1f %cB", v, "kMGTPE"[exp])
}

func gib(n uint64) string { return fmt.Sprintf("%.1f", float64(n)/(1<<30)) }

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func sinceStart(j api.Job) string {
	if j.Progress.ElapsedSeconds > 0 {
		return api.FormatSeconds(j.Progress.ElapsedSeconds)
	}
	if j.Progress.ElapsedHours > 0 {
		return api.FormatSeconds(j.Progress.ElapsedHours * 3600)
	}
	return "-"
}

// writeJob is `genctl status ID`.
func writeJob(w io.Writer, j api.Job) error {
	p := j.Progress
	e := jobETA(j)
	t := newTable(w)
	fmt.Fprintf(t, "job\t%s  %s\n", j.ID, j.Name)
	status := j.Status
	if j.Reason != "" {
		status += " (" + j.Reason + ")"
	}
	fmt.Fprintf(t, "status\t%s\n", status)
	fmt.Fprintf(t, "progress\t%s %.1f%%\n", bar(e.PercentDone), e.PercentDone)
	fmt.Fprintf(t, "done\t%s · %s failed · %s in flight · %s retries\n",
		doneOfTotal(p), api.FormatCount(p.Failed), api.FormatCount(p.InFlight), api.FormatCount(p.Retries))
	fmt.Fprintf(t, "rate\t%.2f req/s · %s tok/s\n", p.RatePerSec, api.FormatRate(p.TokensPerSec))
	if !api.Terminal(j.Status) {
		eta := api.FormatETAInterval(e)
		if p.NaiveETASeconds > 0 && api.ETAKnown(e) {
			eta += " · naive " + api.FormatSeconds(p.NaiveETASeconds)
		}
		fmt.Fprintf(t, "eta\t%s\n", eta)
	}
	fmt.Fprintf(t, "elapsed\t%s\n", sinceStart(j))
	avg := p.AvgOutputTokens
	fmt.Fprintf(t, "tokens\tin %s · out %s · avg out %s\n",
		api.FormatCount(p.TotalInputTokens), api.FormatCount(p.TotalOutputTokens), api.FormatRate(avg))
	fmt.Fprintf(t, "output\t%s\n", orDash(j.Spec.Output.Dir))
	if j.Spec.Output.S3 != "" || p.S3Uploaded > 0 {
		fmt.Fprintf(t, "s3\t%s · %s shards · %s uploaded · %s pending\n", orDash(j.Spec.Output.S3),
			api.FormatCount(p.S3Uploaded), formatBytes(float64(p.S3Bytes)), api.FormatCount(p.S3Pending))
	}
	fmt.Fprintf(t, "scheduler\t%s\n", formatScheduler(j.Scheduler))
	if err := t.Flush(); err != nil {
		return fmt.Errorf("write status: %w", err)
	}
	if len(j.Servers) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	t = newTable(w)
	fmt.Fprintln(t, "SERVER\tSTATE\tLIMIT\tIN-FLIGHT\tQUEUE\tCOMPLETED\tTOK/S\tREASON")
	for _, s := range j.Servers {
		fmt.Fprintf(t, "%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\n", s.Name, orDash(s.State), s.Limit, s.InFlight,
			s.QueueTarget, api.FormatCount(s.Completed), api.FormatRate(s.TokensPerSec), orDash(s.LastReason))
	}
	if err := t.Flush(); err != nil {
		return fmt.Errorf("write status: %w", err)
	}
	return nil
}

// writeJobList is `genctl status --all`.
func writeJobList(w io.Writer, jobs []api.Job) error {
	t := newTable(w)
	fmt.Fprintln(t, "ID\tNAME\tSTATUS\tPRIORITY\tDONE\tFAILED\t%\tTOK/S\tETA\tCREATED")
	for _, j := range jobs {
		e := jobETA(j)
		eta := "-"
		if api.ETAKnown(e) {
			eta = api.FormatSeconds(e.ETASeconds)
		}
		fmt.Fprintf(t, "%s\t%s\t%s\t%d\t%s\t%s\t%.1f\t%s\t%s\t%s\n", j.ID, j.Name, j.Status, j.Priority,
			doneOfTotal(j.Progress), api.FormatCount(j.Progress.Failed), e.PercentDone,
			api.FormatRate(j.Progress.TokensPerSec), eta, j.CreatedAt.UTC().Format(time.RFC3339))
	}
	if err := t.Flush(); err != nil {
		return fmt.Errorf("write jobs: %w", err)
	}
	return nil
}

func formatGPUList(g []int) string {
	if len(g) == 0 {
		return "-"
	}
	s := make([]string, len(g))
	for i, v := range g {
		s[i] = strconv.Itoa(v)
	}
	return strings.Join(s, ",")
}

// writeServers is `genctl servers ls`.
func writeServers(w io.Writer, servers []api.Server) error {
	t := newTable(w)
	fmt.Fprintln(t, "NAME\tURL\tGPUS\tSTATE\tLIMIT\tIN-FLIGHT\tCAPACITY\tRUN/QUEUE\tKV\tREQ/S\tTOK/S\tERR/S\tCOMPLETED\tERRORS\tREASON")
	for _, s := range servers {
		runQueue, kv := "-", "-"
		if g := s.Gauges; g != nil && g.Source != "" && g.Source != "none" {
			runQueue = fmt.Sprintf("%d/%d", g.Running, g.Queued)
			kv = pct(g.TokenUsage)
		}
		fmt.Fprintf(t, "%s\t%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\t%.2f\t%s\t%.2f\t%s\t%s\t%s\n",
			s.Name, s.URL, formatGPUList(s.GPUs), orDash(s.State), s.Limit, s.InFlight, s.Capacity,
			runQueue, kv, s.RatePerSec, api.FormatRate(s.TokensPerSec), s.ErrorsPerSec,
			api.FormatCount(s.Completed), api.FormatCount(s.Errors), orDash(s.LastReason))
	}
	if err := t.Flush(); err != nil {
		return fmt.Errorf("write servers: %w", err)
	}
	return nil
}

// writeGPUs is `genctl gpus`.
func writeGPUs(w io.Writer, g api.GPUs) error {
	if !g.Available {
		_, err := fmt.Fprintf(w, "GPU telemetry unavailable: %s\n", firstNonEmpty(g.Reason, "no reason given"))
		if err != nil {
			return fmt.Errorf("write gpus: %w", err)
		}
		return nil
	}
	head := "source " + firstNonEmpty(g.Source, "-")
	if g.Driver != "" {
		head += " · driver " + g.Driver
	}
	fmt.Fprintln(w, head)
	t := newTable(w)
	fmt.Fprintln(t, "IDX\tNAME\tSERVER\tUTIL\tDRAM-BW\tSM\tTENSOR\tMEMORY GiB\tPEAK-BW\tPOWER W\tTEMP\tSM MHz\tMEM MHz\tTHROTTLE")
	for _, d := range g.GPUs {
		peak := "-"
		if d.PeakBandwidthBytes > 0 {
			peak = formatBytes(d.PeakBandwidthBytes) + "/s"
		}
		throttle := "none"
		if len(d.ClockEventNames) > 0 {
			throttle = strings.Join(d.ClockEventNames, ",")
		} else if d.ClockEventReasons != 0 {
			throttle = fmt.Sprintf("0x%x", d.ClockEventReasons)
		}
		fmt.Fprintf(t, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s/%s\t%s\t%.0f/%.0f\t%.0f°C\t%.0f\t%.0f\t%s\n",
			d.Index, d.Name, orDash(d.Server), pct(d.UtilizationRatio), optPct(d.DRAMBandwidthRatio),
			optPct(d.SMUtilRatio), optPct(d.TensorActiveRatio), gib(d.MemoryUsedBytes), gib(d.MemoryTotalBytes),
			peak, d.PowerWatts, d.PowerLimitWatts, d.TemperatureCelsius, d.SMClockHz/1e6, d.MemClockHz/1e6, throttle)
	}
	if err := t.Flush(); err != nil {
		return fmt.Errorf("write gpus: %w", err)
	}
	return nil
}

// writeDiagnosis is `genctl doctor`.
func writeDiagnosis(w io.Writer, d api.Diagnosis) error {
	t := newTable(w)
	fmt.Fprintf(t, "verdict\t%s\n", d.Verdict)
	fmt.Fprintf(t, "summary\t%s\n", orDash(d.Summary))
	fmt.Fprintf(t, "action\t%s\n", orDash(d.Action))
	if err := t.Flush(); err != nil {
		return fmt.Errorf("write diagnosis: %w", err)
	}
	if len(d.Evidence) > 0 {
		fmt.Fprintln(w, "evidence")
		for _, e := range d.Evidence {
			fmt.Fprintf(w, "  - %s\n", e)
		}
	}
	if len(d.Servers) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	t = newTable(w)
	fmt.Fprintln(t, "SERVER\tVERDICT\tTOK/S\tROOFLINE\tEFFICIENCY\tSUMMARY")
	for _, s := range d.Servers {
		roof, eff := "-", "-"
		if s.RooflineTokPerSec > 0 {
			roof = api.FormatRate(s.RooflineTokPerSec)
			ratio := s.EfficiencyRatio
			if ratio == 0 {
				ratio = s.TokensPerSec / s.RooflineTokPerSec
			}
			eff = pct(ratio)
		}
		fmt.Fprintf(t, "%s\t%s\t%s\t%s\t%s\t%s\n", s.Name, s.Verdict, api.FormatRate(s.TokensPerSec),
			roof, eff, orDash(s.Summary))
	}
	if err := t.Flush(); err != nil {
		return fmt.Errorf("write diagnosis: %w", err)
	}
	var actions, whatIf []string
	for _, s := range d.Servers {
		if s.Action != "" && s.Action != d.Action {
			actions = append(actions, fmt.Sprintf("  %s: %s", s.Name, s.Action))
		}
		for _, wi := range s.WhatIf {
			line := fmt.Sprintf("  %s: %s → %s tok/s", s.Name, wi.Change, api.FormatRate(wi.TokensPerSec))
			if wi.Gain > 0 {
				line += fmt.Sprintf(" (×%.2f)", wi.Gain)
			}
			whatIf = append(whatIf, line)
		}
	}
	if len(actions) > 0 {
		fmt.Fprintln(w, "\nper-server actions")
		fmt.Fprintln(w, strings.Join(actions, "\n"))
	}
	if len(whatIf) > 0 {
		fmt.Fprintln(w, "\nwhat if")
		fmt.Fprintln(w, strings.Join(whatIf, "\n"))
	}
	return nil
}

// watchLine is one update of `genctl watch` when stdout is not a terminal.
func watchLine(j api.Job) string {
	p := j.Progress
	e := jobETA(j)
	limit := 0
	for _, s := range j.Servers {
		limit += s.Limit
	}
	line := fmt.Sprintf("%-9s %5.1f%% %s done · %s failed · %s in flight · %.2f req/s · %s tok/s",
		j.Status, e.PercentDone, doneOfTotal(p), api.FormatCount(p.Failed), api.FormatCount(p.InFlight),
		p.RatePerSec, api.FormatRate(p.TokensPerSec))
	if !api.Terminal(j.Status) {
		line += " · ETA " + api.FormatETAInterval(e)
	}
	if len(j.Servers) > 0 {
		line += fmt.Sprintf(" · limit %s on %d servers", api.FormatCount(int64(limit)), len(j.Servers))
	}
	return line
}

// watchFrame is the redrawn view of `genctl watch` on a terminal.
func watchFrame(w io.Writer, j api.Job) error {
	p := j.Progress
	e := jobETA(j)
	status := j.Status
	if j.Reason != "" {
		status += " (" + j.Reason + ")"
	}
	fmt.Fprintf(w, "job %s  %s  · %s\n", j.ID, j.Name, status)
	fmt.Fprintf(w, "%s %5.1f%%  %s done · %s failed · %s in flight\n", bar(e.PercentDone), e.PercentDone,
		doneOfTotal(p), api.FormatCount(p.Failed), api.FormatCount(p.InFlight))
	eta := "ETA " + api.FormatETAInterval(e)
	if api.Terminal(j.Status) {
		eta = j.Status
	}
	fmt.Fprintf(w, "%.2f req/s · %s tok/s · %s · elapsed %s\n", p.RatePerSec, api.FormatRate(p.TokensPerSec),
		eta, sinceStart(j))
	if len(j.Servers) == 0 {
		return nil
	}
	fmt.Fprintln(w)
	t := newTable(w)
	fmt.Fprintln(t, "SERVER\tSTATE\tLIMIT\tIN-FLIGHT\tTOK/S\tREASON")
	for _, s := range j.Servers {
		fmt.Fprintf(t, "%s\t%s\t%d\t%d\t%s\t%s\n", s.Name, orDash(s.State), s.Limit, s.InFlight,
			api.FormatRate(s.TokensPerSec), orDash(s.LastReason))
	}
	if err := t.Flush(); err != nil {
		return fmt.Errorf("write watch: %w", err)
	}
	return nil
}

// finalLine is what watch prints when the job has ended.
func finalLine(j api.Job) string {
	p := j.Progress
	s := fmt.Sprintf("job %s %s after %s: %s completed, %s failed", j.ID, j.Status, sinceStart(j),
		api.FormatCount(p.Completed), api.FormatCount(p.Failed))
	if j.Reason != "" {
		s += " (" + j.Reason + ")"
	}
	if j.Spec.Output.Dir != "" {
		s += "; output in " + j.Spec.Output.Dir
	}
	return s
}
