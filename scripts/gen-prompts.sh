#!/usr/bin/env bash
# gen-prompts.sh N: N chat prompts in the DESIGN.md chat form, deterministic.
set -euo pipefail
n=${1:-2000}
topics=(sorting graphs "prime sieves" "hash tables" "binary search" recursion "dynamic programming" compilers \
  "garbage collection" "TCP congestion control" "B-trees" "consensus protocols" "floating point" "regular expressions" \
  "matrix multiplication" "bloom filters")
verbs=("Explain" "Give three uses of" "Write a short tutorial on" "Compare two approaches to" "Summarise the history of" \
  "List common mistakes with" "Describe an interview question about")
for ((i = 0; i < n; i++)); do
  t=${topics[$((i % ${#topics[@]}))]}
  v=${verbs[$(((i / ${#topics[@]}) % ${#verbs[@]}))]}
  printf '{"custom_id":"demo-%06d","messages":[{"role":"user","content":"%s %s (variant %d)."}]}\n' "$i" "$v" "$t" "$i"
done
