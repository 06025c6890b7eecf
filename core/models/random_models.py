"""Random-init models of several architectures with a word-level number tokenizer, saved to a folder.

The tests and the benchmark build their models with this: nothing is downloaded, every number
0..max_number is one token, and the folder loads through the same `core.models.loading.load_model`
path as a real checkpoint (config.json + model.safetensors + tokenizer files).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import transformers as tf
from gguf import GGMLQuantizationType, GGUFWriter, TokenType
from gguf.quants import dequantize
from gguf.quants import quantize as quantize_array
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM
from transformers.convert_slow_tokenizer import bytes_to_unicode

from core.errors import CoreError
from core.models.vocab import number_tokenizer

ARCHITECTURES = ("gpt2", "gptj", "gpt_neox", "phi", "llama", "mistral", "qwen2")
#: Layouts that normalise each module's output before adding it to the stream (handled by hooking the post-norms).
POST_NORM_ARCHITECTURES = ("gemma2", "olmo2")


def random_config(
    arch: str, vocab_size: int, n_layers: int = 2, width: int = 64, heads: int = 4, max_positions: int = 256, **special
):
    """A small config of `arch`; `special` sets token ids (pad_token_id, bos_token_id, eos_token_id)."""
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
    choices = ", ".join(ARCHITECTURES + POST_NORM_ARCHITECTURES)
    raise CoreError(f"unknown architecture {arch!r}: choose one of {choices}")


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


def _llama_cpp_permute(w, n_heads: int):
    """The row order llama.cpp's converter gives q/k projections (transformers undoes it on load)."""
    return w.reshape(n_heads, 2, w.shape[0] // n_heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_tiny_llama_gguf(path: str | Path, n_layers: int = 2, width: int = 64, heads: int = 4, kv_heads: int = 2,
                          seed: int = 0, quantize: str | None = "Q8_0", architecture: str = "llama"):
    """Write a tiny random Llama as a GGUF file the way llama.cpp lays one out, for tests.

    The tokenizer is byte-level BPE (GGUF tokenizer model "gpt2": the 256 byte tokens, a few merges
    and <|endoftext|>). The 2-D weights are stored quantized (`quantize`, e.g. "Q8_0") or as F32.
    Returns (path, reference): `reference` is a transformers model holding exactly the weights the
    file stores (after quantization), so an import can be checked against its logits.
    """
    spell = bytes_to_unicode()
    tokens = [spell[b] for b in range(256)]
    merges = ["Ġ t", "h e", "Ġt he", "Ġ a", "n d", "Ġa nd", "1 5", "9 3", "Ġ 1", "e r"]
    for m in merges:
        tokens.append(m.replace(" ", ""))
    tokens.append("<|endoftext|>")
    eos = len(tokens) - 1
    types = [TokenType.NORMAL] * (len(tokens) - 1) + [TokenType.CONTROL]
    config = LlamaConfig(
        vocab_size=len(tokens), hidden_size=width, intermediate_size=2 * width, num_hidden_layers=n_layers,
        num_attention_heads=heads, num_key_value_heads=kv_heads, max_position_embeddings=128, rms_norm_eps=1e-5,
        rope_theta=10000.0, tie_word_embeddings=True, bos_token_id=eos, eos_token_id=eos, pad_token_id=eos,
    )
    torch.manual_seed(seed)
    reference = LlamaForCausalLM(config).eval()
    qtype = GGMLQuantizationType[quantize] if quantize else GGMLQuantizationType.F32

    writer = GGUFWriter(str(path), architecture)
    writer.add_name("tiny llama for tests")
    writer.add_context_length(128)
    writer.add_embedding_length(width)
    writer.add_block_count(n_layers)
    writer.add_feed_forward_length(2 * width)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_rope_dimension_count(width // heads)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges(merges)
    writer.add_bos_token_id(eos)
    writer.add_eos_token_id(eos)
    writer.add_pad_token_id(eos)

    def put(name: str, tensor, permute_heads: int | None = None):
        w = tensor.detach().float().numpy()
        if permute_heads:
            w = _llama_cpp_permute(w, permute_heads)
        if w.ndim == 2 and qtype != GGMLQuantizationType.F32:
            q = quantize_array(w, qtype)
            writer.add_tensor(name, q, raw_dtype=qtype)
            stored = dequantize(q, qtype).reshape(w.shape)
        else:
            writer.add_tensor(name, w.astype(np.float32))
            stored = w
        if permute_heads:  # undo the permutation: the reference holds what the file means
            inv = stored.reshape(permute_heads, stored.shape[0] // permute_heads // 2, 2, *stored.shape[1:])
            stored = inv.swapaxes(1, 2).reshape(stored.shape)
        with torch.no_grad():
            tensor.copy_(torch.as_tensor(np.ascontiguousarray(stored)))

    m = reference.model
    put("token_embd.weight", m.embed_tokens.weight)
    for i, layer in enumerate(m.layers):
        a, f = layer.self_attn, layer.mlp
        put(f"blk.{i}.attn_norm.weight", layer.input_layernorm.weight)
        put(f"blk.{i}.attn_q.weight", a.q_proj.weight, heads)
        put(f"blk.{i}.attn_k.weight", a.k_proj.weight, kv_heads)
        put(f"blk.{i}.attn_v.weight", a.v_proj.weight)
        put(f"blk.{i}.attn_output.weight", a.o_proj.weight)
        put(f"blk.{i}.ffn_norm.weight", layer.post_attention_layernorm.weight)
        put(f"blk.{i}.ffn_gate.weight", f.gate_proj.weight)
        put(f"blk.{i}.ffn_up.weight", f.up_proj.weight)
        put(f"blk.{i}.ffn_down.weight", f.down_proj.weight)
    put("output_norm.weight", m.norm.weight)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return Path(path), reference
