#!/usr/bin/env bash
# Installs what `make test` needs beyond Go: Debian's prometheus package
# (promtool for `promtool check metrics/rules`, and a real Prometheus for the
# scrape test). Idempotent; installs only what is missing.
set -euo pipefail
need=()
command -v promtool >/dev/null 2>&1 || need+=(prometheus)
command -v gcc >/dev/null 2>&1 || need+=(gcc)
if [ ${#need[@]} -eq 0 ]; then exit 0; fi
SUDO=""
if [ "$(id -u)" -ne 0 ]; then
  if command -v sudo >/dev/null 2>&1; then SUDO=sudo; else
    echo "test-deps: need ${need[*]} (apt-get install ${need[*]}) and not root" >&2; exit 1; fi
fi
echo "test-deps: installing ${need[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
# The package starts a prometheus service where systemd runs; tests start their own.
if command -v systemctl >/dev/null 2>&1 && [ -d /run/systemd/system ]; then
  $SUDO systemctl disable --now prometheus >/dev/null 2>&1 || true
fi
