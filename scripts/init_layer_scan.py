"""Which layer's number representations make the best starting rows for the added number tokens?

Prints the un-tuned model's answer loss on a seeded sample of the training split for each layer.
Run: .venv/bin/python scripts/init_layer_scan.py [--recipe smollm2-addition] [--layers 0,1,2,3,5,8,12,20,30]
"""

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from core.finetune import init_layer_scan  # noqa: E402
from core.train import Recipe  # noqa: E402

parser = argparse.ArgumentParser()
parser.add_argument("--recipe", default="smollm2-addition")
parser.add_argument("--layers", default="0,1,2,3,5,8,12,20,30")
parser.add_argument("--n", type=int, default=256)
parser.add_argument("--threads", type=int, default=1)
args = parser.parse_args()
import torch  # noqa: E402

torch.set_num_threads(args.threads)
frame = init_layer_scan(Recipe.load(args.recipe), [int(x) for x in args.layers.split(",")], args.n)
print(frame.to_string(index=False))
