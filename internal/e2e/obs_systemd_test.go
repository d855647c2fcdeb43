package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestSystemdUnit checks deploy/systemd/gend.service with
// `systemd-analyze verify` where systemd-analyze is installed (skips
// otherwise). ExecStart points at /usr/local/bin/gend, which a test machine
// lacks, so a copy pointing at the freshly built gend is verified; nothing
// else in the unit is changed. It also holds the unit to what docs/deploy.md
// promises: not root, logs to the journal, a drain bounded below the stop
// timeout, secrets from files.
func TestSystemdUnit(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(deployDir(t), "systemd", "gend.service"))
	if err != nil {
		t.Fatal(err)
	}
	unit := string(raw)
	for _, want := range []string{
		"User=gend", "StateDirectory=gend", "ExecStart=/usr/local/bin/gend ", "GEND_TOKEN_FILE=/etc/gend/token",
		"AWS_SHARED_CREDENTIALS_FILE=/etc/gend/aws-credentials", "StandardError=journal", "KillSignal=SIGTERM",
		"TimeoutStopSec=180", "NoNewPrivileges=yes", "ProtectSystem=strict", "WantedBy=multi-user.target",
	} {
		if !strings.Contains(unit, want) {
			t.Errorf("gend.service lacks %q", want)
		}
	}
	for _, bad := range []string{"User=root", "StandardError=file:", "StandardOutput=file:", "AWS_SECRET_ACCESS_KEY=", "GEND_TOKEN="} {
		if strings.Contains(unit, bad) {
			t.Errorf("gend.service has %q", bad)
		}
	}

	analyze, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skipf("systemd-analyze not installed (Debian package systemd): %v", err)
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "gend.service")
	copyUnit := strings.ReplaceAll(unit, "/usr/local/bin/gend", filepath.Join(binDir, "gend"))
	if err := os.WriteFile(path, []byte(copyUnit), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(analyze, "verify", path)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Fatalf("systemd-analyze verify gend.service: %v\n%s", err, out)
	}
}
