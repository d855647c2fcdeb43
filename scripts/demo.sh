#!/usr/bin/env bash
# make demo: gensim (a simulated 4-GPU SGLang fleet) + gend + a sample job,
# watched live with genctl until it completes. Stops what it started.
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=bin
DEMO=demo
N=${DEMO_PROMPTS:-2000}
SPEEDUP=${DEMO_SPEEDUP:-100}
SIM_PORT=${DEMO_SIM_PORT:-31000}
GEND_PORT=${DEMO_GEND_PORT:-9419}

rm -rf "$DEMO"
mkdir -p "$DEMO" testdata
PROMPTS=testdata/demo-prompts.jsonl
bash scripts/gen-prompts.sh "$N" > "$PROMPTS"

pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
}
trap cleanup EXIT INT TERM

echo "demo: starting gensim: 4 simulated RTX PRO 6000 GPUs serving a 27B model (speedup ${SPEEDUP}x)"
$BIN/gensim --servers 4 --port "$SIM_PORT" --speedup "$SPEEDUP" > "$DEMO/gensim.log" 2>&1 &
pids+=($!)
for i in $(seq 1 100); do grep -q "gensim: ready" "$DEMO/gensim.log" 2>/dev/null && break; sleep 0.1; done
grep -q "gensim: ready" "$DEMO/gensim.log" || { echo "demo: gensim did not start:"; cat "$DEMO/gensim.log"; exit 1; }

{
  echo "servers:"
  for i in 0 1 2 3; do
    echo "  - {name: gpu$i, url: http://127.0.0.1:$((SIM_PORT + i)), gpus: [$i]}"
  done
  echo "model: {weight_bytes: 54000000000, kv_bytes_per_token: 262144}"
} > "$DEMO/fleet.yaml"

echo "demo: starting gend on 127.0.0.1:${GEND_PORT} (logs in $DEMO/gend.log)"
$BIN/gend --listen "127.0.0.1:$GEND_PORT" --state-dir "$DEMO/state" --config "$DEMO/fleet.yaml" --nvml sim \
  --control-period 250ms > "$DEMO/gend.log" 2>&1 &
pids+=($!)
export GEND_ADDR="http://127.0.0.1:$GEND_PORT"
for i in $(seq 1 100); do (exec 3<>"/dev/tcp/127.0.0.1/$GEND_PORT") 2>/dev/null && break; sleep 0.1; done

cat > "$DEMO/job.yaml" <<YAML
name: demo-thinking
input: $PROMPTS
request:
  endpoint: /v1/chat/completions
  model: default
  params: {temperature: 0.6, max_tokens: 16384, chat_template_kwargs: {enable_thinking: true}}
output:
  dir: $DEMO/out
  shard_records: 500
  shard_seconds: 30
scheduler: {mode: adaptive}
YAML
ID=$($BIN/genctl start -f "$DEMO/job.yaml" -o json | sed -n 's/^  "id": "\(.*\)",$/\1/p' | head -1)
echo "demo: job $ID submitted ($N prompts, thinking mode, ~2,500-token outputs with a heavy tail)"
sleep 6
echo "demo: what limits throughput right now (genctl doctor):"
$BIN/genctl doctor || true
echo
$BIN/genctl watch "$ID" || true
echo
echo "demo: output in $DEMO/out: shards/ (OpenAI Batch format), errors.jsonl, manifest.json, progress.json"
ls -l "$DEMO/out" "$DEMO/out/shards" | head -20
