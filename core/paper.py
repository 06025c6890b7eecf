"""The paper's reported numbers (Zhou et al., NeurIPS 2024), for side-by-side comparison.

Quoted from the paper, as docs/method.md#the-papers-results lists them. Accuracies in percent, losses as reported.
"""

#: Table 1: fine-tuned GPT-2-XL, filters on every layer (tau = 50): (validation loss, accuracy %).
#: Keys: (modules, band removed).
TABLE1_GPT2_XL = {
    ("none", "none"): (0.0073, 99.74),
    ("both", "low"): (4.0842, 5.94),
    ("attn", "low"): (0.0352, 99.12),
    ("mlp", "low"): (2.1399, 35.89),
    ("both", "high"): (1.8598, 27.08),
    ("attn", "high"): (0.5943, 78.36),
    ("mlp", "high"): (0.1213, 98.10),
}
TABLE1_TAU = 50

ACCURACY = {
    "GPT-2-XL fine-tuned": 99.74,
    "GPT-2-XL from scratch (500 epochs)": 94.44,
    "GPT-2-small from scratch": 53.95,
    "GPT-2-small, frozen pre-trained embeddings": 100.0,
    "GPT-2-XL multiplication (val)": 74.58,
}

#: Share (%) of wrong answers whose error is a multiple of 10.
MULTIPLE_OF_10 = {
    "GPT-J 4-shot": 93,
    "Phi-2 4-shot": 73,
    "GPT-3.5 0-shot": 100,
    "GPT-4 0-shot": 100,
    "PaLM-2 0-shot": 87,
}

#: Keep-one-frequency with period 2: predictions with the right parity (%).
PARITY_KEEP_PERIOD_2 = 99.59

#: Periods at which pre-trained embeddings and module logits show outliers.
OUTLIER_PERIODS = (2.0, 2.5, 5.0, 10.0)
