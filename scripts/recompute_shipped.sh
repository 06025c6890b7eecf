#!/usr/bin/env bash
# Recompute every shipped run from the shipped weights (after a change to the analysis code).
#   bash scripts/recompute_shipped.sh [THREADS]
# The untied control ships no weights: rebuild them first with
#   .venv/bin/python -m core train --recipe fourier-frozen-untied --threads 1
# Runs keep their folder names (the name hashes what determines the numbers, not the code).
set -euo pipefail
cd "$(dirname "$0")/.."
THREADS="${1:-auto}"
TAUS=10,20,30,40,50,75,100,150,200,250
order=1
for model in fourier-frozen scratch fourier-frozen-untied pretrained-mini; do
  if ls "models/$model"/model*.safetensors >/dev/null 2>&1; then
    .venv/bin/python -m core precompute --model "models/$model" --taus "$TAUS" --display-order "$order" \
      --threads "$THREADS" --recompute --no-progress
  else
    echo "skipping $model: no weights in models/$model (see the comment at the top of this script)" >&2
  fi
  order=$((order + 1))
done
# the real pre-trained model (import it first: python -m core import-model smollm2-135m)
if ls models/smollm2-135m/model*.safetensors >/dev/null 2>&1; then
  .venv/bin/python -m core precompute --model models/smollm2-135m --limit 1000 --display-order 5 \
    --threads "$THREADS" --recompute --no-progress
else
  echo "skipping smollm2-135m: import it with python -m core import-model smollm2-135m" >&2
fi
.venv/bin/python -m core verify
