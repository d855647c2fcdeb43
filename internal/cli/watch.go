package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/gend-dev/gend/api"
)

// maxPollFailures is how many polls in a row may fail to reach gend (e.g.
// while it restarts) before watch gives up.
const maxPollFailures = 10

func runWatch(ctx context.Context, a *app, args []string) error {
	fs := a.flagSet("watch")
	interval := fs.Duration("interval", time.Second, "time between updates")
	pos, err := a.parse(fs, args, 0, 1)
	if err != nil {
		return err
	}
	if *interval <= 0 {
		return usagef("watch: --interval must be positive")
	}
	rctx, cancel := context.WithTimeout(ctx, callTimeout)
	id, err := a.resolveJob(rctx, first(pos))
	cancel()
	if err != nil {
		return err
	}
	return a.watch(ctx, id, *interval)
}

// watch polls the job every interval and shows it until it ends: nil when it
// completed, an error when it failed or was cancelled, when the API refuses
// the poll, or after maxPollFailures polls in a row could not reach gend.
// It runs on the caller's goroutine and stops when ctx is done.
func (a *app) watch(ctx context.Context, id string, interval time.Duration) error {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	pollTimeout := max(10*time.Second, 3*interval)
	prevLines, failures := 0, 0
	for {
		j, raw, err := a.poll(ctx, id, pollTimeout)
		switch {
		case err != nil && ctx.Err() != nil:
			return ctx.Err()
		case err != nil:
			var ae *api.Error
			if errors.As(err, &ae) {
				return err
			}
			failures++
			if failures >= maxPollFailures {
				return err
			}
			fmt.Fprintf(a.stderr, "genctl: %v (retrying)\n", err)
		default:
			failures = 0
			n, err := a.show(j, raw, prevLines)
			if err != nil {
				return err
			}
			prevLines = n
			if api.Terminal(j.Status) {
				return a.ended(j)
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ticker.C:
		}
	}
}

func (a *app) poll(ctx context.Context, id string, timeout time.Duration) (api.Job, []byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var j api.Job
	_, raw, err := a.api().Do(ctx, http.MethodGet, api.JobPath(id, ""), nil)
	if err != nil {
		return j, nil, err
	}
	if err := json.Unmarshal(raw, &j); err != nil {
		return j, nil, fmt.Errorf("decode job %s: %w", id, err)
	}
	return j, raw, nil
}

// show prints one update and returns how many lines a terminal frame took.
func (a *app) show(j api.Job, raw []byte, prevLines int) (int, error) {
	var buf bytes.Buffer
	switch {
	case a.json():
		if err := json.Compact(&buf, raw); err != nil {
			return 0, fmt.Errorf("compact job %s: %w", j.ID, err)
		}
		buf.WriteByte('\n')
	case a.tty:
		if prevLines > 0 {
			// Back to the top of the previous frame, clear to the end.
			fmt.Fprintf(&buf, "\x1b[%dA\r\x1b[J", prevLines)
		}
		start := buf.Len()
		if err := watchFrame(&buf, j); err != nil {
			return 0, err
		}
		prevLines = bytes.Count(buf.Bytes()[start:], []byte("\n"))
	default:
		buf.WriteString(watchLine(j))
		buf.WriteByte('\n')
	}
	if _, err := a.stdout.Write(buf.Bytes()); err != nil {
		return 0, fmt.Errorf("write output: %w", err)
	}
	return prevLines, nil
}

func (a *app) ended(j api.Job) error {
	if !a.json() {
		fmt.Fprintln(a.stdout, finalLine(j))
	}
	if j.Status == api.StatusCompleted {
		return nil
	}
	if j.Reason != "" {
		return fmt.Errorf("job %s %s: %s", j.ID, j.Status, j.Reason)
	}
	return fmt.Errorf("job %s %s", j.ID, j.Status)
}
