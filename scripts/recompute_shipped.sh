#!/usr/bin/env bash
# Recompute every shipped run from the shipped weights (after a change to the analysis code).
#   bash scripts/recompute_shipped.sh [THREADS] [DEMO_PATTERN]   (with a pattern: only those demo models, then verify)
# With UPGRADE=1 a run is not rebuilt: only what an older version of the code left is made anew (for example the
# phase-shift tables of version 1, core.runs.cached_run), which takes minutes instead of hours.
# The untied control ships no weights: rebuild them first with
#   .venv/bin/python -m core train --recipe fourier-frozen-untied --threads 1
# Runs keep their folder names (the name hashes what determines the numbers, not the code).
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS="${1:-auto}"
TAUS=10,20,30,40,50,75,100,150,200,250
# the demo models trained here, model:display order:task (the dashboard lists runs by order; equal orders go by label)
DEMOS="fourier-frozen:1:addition smollm2-frozen:2:addition scratch:2:addition fourier-frozen-untied:3:addition
  pretrained-mini:4:addition multiplication-fourier-frozen:6:multiplication multiplication-scratch:7:multiplication
  reverse-polish-fourier-frozen:6:reverse-polish reverse-polish-scratch:7:reverse-polish"
ONLY="${2:-}"  # a second argument: only the demo models whose names match this pattern (e.g. 'multiplication-*')
RECOMPUTE=--recompute
if [ "${UPGRADE:-0}" = 1 ]; then RECOMPUTE=; fi
for entry in $DEMOS; do
  model="${entry%%:*}"; rest="${entry#*:}"; order="${rest%%:*}"; task="${rest#*:}"
  # shellcheck disable=SC2053
  if [ -n "$ONLY" ] && [[ "$model" != $ONLY ]]; then continue; fi
  if ls "models/$model"/model*.safetensors >/dev/null 2>&1; then
    .venv/bin/python -m core precompute --model "models/$model" --task "$task" --taus "$TAUS" \
      --display-order "$order" --threads "$THREADS" $RECOMPUTE --no-progress
  else
    echo "skipping $model: no weights in models/$model (see the comment at the top of this script)" >&2
  fi
done
# the seed runs: their weights are not shipped; retrain them first
#   (.venv/bin/python -m core train --recipe fourier-frozen --seed 1 [--device cuda]; smollm2-frozen needs SmolLM2 imported)
for seed in models/fourier-frozen/seeds/s[0-9]* models/smollm2-frozen/seeds/s[0-9]*; do
  if [ -n "$ONLY" ] && [[ "$seed" != models/$ONLY/* ]]; then continue; fi
  if ls "$seed"/model*.safetensors >/dev/null 2>&1; then
    .venv/bin/python -m core precompute --model "$seed" --task addition --taus "$TAUS" --display-order 9 \
      --threads "$THREADS" $RECOMPUTE --no-progress
  else
    echo "skipping $seed: no weights (retrain it, see above)" >&2
  fi
done
if [ -n "$ONLY" ]; then .venv/bin/python -m core verify; exit 0; fi
# the real pre-trained model (import it first: python -m core import-model smollm2-135m)
if ls models/smollm2-135m/model*.safetensors >/dev/null 2>&1; then
  .venv/bin/python -m core precompute --model models/smollm2-135m --limit 1000 --display-order 5 \
    --threads "$THREADS" $RECOMPUTE --no-progress
else
  echo "skipping smollm2-135m: import it with python -m core import-model smollm2-135m" >&2
fi
# the default run: SmolLM2 fine-tuned with number tokens (on a lent GPU); its delta is shipped, and rebuild imports the base
# model first when it is not here (the earlier stages ship only their logs: docs/fine-tuning.md). Every question for
# every table (--every-question): about 4 hours on two CPU threads from nothing (docs/speed.md)
model=smollm2-addition-rows-blocks-18-29
[ -f "models/$model/model.safetensors" ] || .venv/bin/python -m core rebuild "$model"
.venv/bin/python -m core precompute --model "models/$model" --taus "$TAUS" --display-order 0 --every-question \
  --threads "$THREADS" $RECOMPUTE --no-progress
.venv/bin/python -m core verify
