"""Random-init models of several architectures with a word-level number tokenizer, saved to a folder.

The tests and the benchmark build their models with this: nothing is downloaded, every number
0..max_number is one token, and the folder loads through the same `core.models.load_model`
path as a real checkpoint (config.json + model.safetensors + tokenizer files).
"""

from __future__ import annotations

from pathlib import Path

from core.errors import CoreError
from core.vocab import number_tokenizer

ARCHITECTURES = ("gpt2", "gptj", "gpt_neox", "phi", "llama", "mistral", "qwen2")
#: Layouts that normalise each module's output before adding it to the stream (handled by hooking the post-norms).
POST_NORM_ARCHITECTURES = ("gemma2", "olmo2")


def random_config(
    arch: str, vocab_size: int, n_layers: int = 2, width: int = 64, heads: int = 4, max_positions: int = 256, **special
):
    """A small config of `arch`; `special` sets token ids (pad_token_id, bos_token_id, eos_token_id)."""
    import transformers as tf

    return _config(tf, arch, vocab_size, n_layers, width, heads, max_positions, special)


def _config(tf, arch, vocab_size, n_layers, width, heads, max_positions, special):
    common_llama = dict(
        vocab_size=vocab_size,
        hidden_size=width,
        intermediate_size=2 * width,
        num_hidden_layers=n_layers,
        num_attention_heads=heads,
        num_key_value_heads=heads // 2 if heads % 2 == 0 else heads,
        max_position_embeddings=max_positions,
        tie_word_embeddings=False,
        **special,
    )
    if arch == "gpt2":
        return tf.GPT2Config(
            vocab_size=vocab_size, n_embd=width, n_layer=n_layers, n_head=heads, n_positions=max_positions, **special
        )
    if arch == "gptj":
        return tf.GPTJConfig(
            vocab_size=vocab_size, n_embd=width, n_layer=n_layers, n_head=heads, n_positions=max_positions,
            rotary_dim=width // heads // 2,
            **special,
        )
    if arch == "gpt_neox":
        return tf.GPTNeoXConfig(
            vocab_size=vocab_size,
            hidden_size=width,
            num_hidden_layers=n_layers,
            num_attention_heads=heads,
            intermediate_size=2 * width,
            max_position_embeddings=max_positions,
            use_parallel_residual=True,
            **special,
        )
    if arch == "phi":
        return tf.PhiConfig(
            vocab_size=vocab_size,
            hidden_size=width,
            intermediate_size=2 * width,
            num_hidden_layers=n_layers,
            num_attention_heads=heads,
            max_position_embeddings=max_positions,
            **special,
        )
    if arch == "llama":
        return tf.LlamaConfig(**common_llama)
    if arch == "mistral":
        return tf.MistralConfig(**common_llama, sliding_window=None)
    if arch == "qwen2":
        return tf.Qwen2Config(**common_llama)
    if arch == "gemma2":
        return tf.Gemma2Config(**common_llama, head_dim=width // heads, final_logit_softcapping=30.0)
    if arch == "olmo2":
        return tf.Olmo2Config(**common_llama)
    raise CoreError(f"unknown architecture {arch!r}: choose one of {', '.join(ARCHITECTURES + POST_NORM_ARCHITECTURES)}")


def save_random_model(
    folder: str | Path,
    arch: str = "gpt2",
    n_layers: int = 2,
    width: int = 64,
    heads: int = 4,
    max_number: int = 600,
    seed: int = 0,
    tokenizer=None,
) -> Path:
    """Build a random-init model with a number tokenizer and save both (safetensors) to `folder`."""
    import torch
    from transformers import AutoModelForCausalLM

    tok = tokenizer if tokenizer is not None else number_tokenizer(max_number)
    special = dict(pad_token_id=tok.pad_token_id, bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id)
    config = random_config(arch, len(tok), n_layers, width, heads, **special)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(folder, safe_serialization=True)
    tok.save_pretrained(folder)
    return folder
