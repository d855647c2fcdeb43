#!/usr/bin/env bash
# gpu-evidence.sh: on a machine with an NVIDIA GPU and driver, build gend,
# run it with real NVML telemetry (--nvml auto) and record GET /v1/gpus and the
# gend_gpu_* metrics while the GPU is idle and while a load runs, into
# docs/gpu-evidence/ (commit that folder as the evidence for issue 7).
#
# The load is a PyTorch bf16 matmul loop and a device-to-device copy loop when
# torch with CUDA is importable (copy: DRAM bandwidth near its peak; matmul:
# tensor cores busy); else a CuPy copy loop; else no load (said in the output).
# nvidia-smi is not needed; its output is added when present, for comparison.
#
#   scripts/gpu-evidence.sh            # about a minute after the build
#   EVIDENCE_SECONDS=20 scripts/gpu-evidence.sh
#
# Stops only what it started. Needs go, curl, and python3 for the load.
set -euo pipefail
cd "$(dirname "$0")/.."

OUT=${EVIDENCE_DIR:-docs/gpu-evidence}
SECS=${EVIDENCE_SECONDS:-25}       # per load phase
PORT=${EVIDENCE_PORT:-9431}
WORK=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

mkdir -p "$OUT"
rm -f "$OUT"/*.json "$OUT"/*.prom "$OUT"/*.txt "$OUT"/*.log
log() { echo "gpu-evidence: $*" | tee -a "$OUT/run.txt"; }

log "date $(date -u +%FT%TZ), host $(uname -srm), commit $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
log "go $(go env GOVERSION)"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv >>"$OUT/run.txt" 2>&1 || true

CGO_CFLAGS="-O2 -Wno-deprecated-declarations" go build -o "$WORK/gend" ./cmd/gend
log "built gend"

"$WORK/gend" --listen "127.0.0.1:$PORT" --state-dir "$WORK/state" --nvml auto --log-format json >"$OUT/gend.log" 2>&1 &
pids+=($!)
API="http://127.0.0.1:$PORT"
for _ in $(seq 1 100); do curl -fsS "$API/readyz" >/dev/null 2>&1 && break; sleep 0.1; done
curl -fsS "$API/readyz" >/dev/null || { log "gend did not become ready"; exit 1; }

# snap NAME: one /v1/gpus document, the gend_gpu_* metrics, and nvidia-smi if present.
snap() {
  curl -fsS "$API/v1/gpus" >"$OUT/gpus-$1.json"
  curl -fsS "$API/metrics" | grep -E '^(# (HELP|TYPE) )?gend_gpu_' >"$OUT/metrics-$1.prom" || true
  if command -v nvidia-smi >/dev/null; then
    nvidia-smi --query-gpu=index,utilization.gpu,utilization.memory,memory.used,power.draw,clocks.sm,clocks.mem \
      --format=csv >"$OUT/nvidia-smi-$1.txt" 2>&1 || true
  fi
  log "recorded $1"
}

sleep 3 # a few sampler periods
snap idle
if ! grep -q '"available": *true' "$OUT/gpus-idle.json"; then
  log "NVML unavailable: $(grep -o '"reason": *"[^"]*"' "$OUT/gpus-idle.json" || true); nothing more to record"
  exit 1
fi

# load.py KIND SECONDS: a GPU load on GPU 0.
cat >"$WORK/load.py" <<'PY'
import sys, time
kind, secs = sys.argv[1], float(sys.argv[2])
end = time.time() + secs
try:
    import torch
    assert torch.cuda.is_available()
    dev = torch.device("cuda:0")
    if kind == "copy":
        a = torch.empty(1 << 30, dtype=torch.uint8, device=dev)  # 1 GiB
        b = torch.empty_like(a)
        while time.time() < end:
            for _ in range(50):
                b.copy_(a)
            torch.cuda.synchronize()
    else:
        a = torch.randn(8192, 8192, dtype=torch.bfloat16, device=dev)
        b = torch.randn(8192, 8192, dtype=torch.bfloat16, device=dev)
        while time.time() < end:
            for _ in range(20):
                c = a @ b
            torch.cuda.synchronize()
    print("torch", torch.__version__, kind)
except (ImportError, AssertionError):
    import cupy as cp  # fallback: copy loop only
    a = cp.empty(1 << 30, dtype=cp.uint8)
    b = cp.empty_like(a)
    while time.time() < end:
        for _ in range(50):
            b[...] = a
        cp.cuda.Device(0).synchronize()
    print("cupy", cp.__version__, "copy (no torch)")
PY

for kind in copy matmul; do
  if ! python3 -c 'import torch' 2>/dev/null && ! python3 -c 'import cupy' 2>/dev/null; then
    log "no torch or cupy: no GPU load; only the idle snapshot is evidence"
    break
  fi
  python3 "$WORK/load.py" "$kind" "$SECS" >>"$OUT/run.txt" 2>&1 &
  lp=$!
  pids+=("$lp")
  log "started $kind load (pid $lp) for ${SECS}s"
  sleep $((SECS / 2))
  snap "$kind-mid"
  sleep 3
  snap "$kind-late"
  wait "$lp" || log "$kind load exited with an error (see above)"
  sleep 3
done
snap after
log "done: $(ls "$OUT" | tr '\n' ' ')"
