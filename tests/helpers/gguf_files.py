"""Tiny GGUF files written by ``gguf.GGUFWriter`` from random weights under Hugging Face names,
with this package's own Q4_K/Q6_K quantizers and each tensor type's quantization tolerance."""

from __future__ import annotations

import gguf
import numpy as np
from gguf import GGMLQuantizationType as Q

from arlarena_jax.tokenization.token_bytes import _byte_decoder

SHAPE = dict(hidden=256, inter=512, heads=4, kv=2, head_dim=64, layers=1)  # K-quant rows: 256
# Qwen3 with head_dim 128 (every release's): transformers' GGUF loader reads no head_dim for
# qwen3 and takes Qwen3Config's default, 128.
QWEN3_SHAPE = SHAPE | dict(heads=2, kv=1, head_dim=128)
BYTE_CHARS = sorted(_byte_decoder(), key=_byte_decoder().get)  # GPT-2's spelling of bytes 0..255
MERGES = ["h e", "l l", "he ll", "Ġ w"]
TOKENS = [*BYTE_CHARS, "he", "ll", "hell", "Ġw", "<|im_start|>", "<|im_end|>"]
TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
)


def hf_weights(arch: str, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Random weights under Hugging Face names ([out, in] matrices)."""
    shape = QWEN3_SHAPE if arch == "qwen3" else SHAPE
    h, i, d = shape["hidden"], shape["inter"], shape["head_dim"]
    q, kv = shape["heads"] * d, shape["kv"] * d
    out = {"model.embed_tokens.weight": (len(TOKENS), h), "model.norm.weight": (h,)}
    p = "model.layers.0."
    out |= {
        p + "input_layernorm.weight": (h,),
        p + "post_attention_layernorm.weight": (h,),
        p + "self_attn.q_proj.weight": (q, h),
        p + "self_attn.k_proj.weight": (kv, h),
        p + "self_attn.v_proj.weight": (kv, h),
        p + "self_attn.o_proj.weight": (h, q),
        p + "mlp.gate_proj.weight": (i, h),
        p + "mlp.up_proj.weight": (i, h),
        p + "mlp.down_proj.weight": (h, i),
    }
    if arch == "qwen2":
        out |= {p + f"self_attn.{n}_proj.bias": (s,) for n, s in (("q", q), ("k", kv), ("v", kv))}
    if arch == "qwen3":
        out |= {p + "self_attn.q_norm.weight": (d,), p + "self_attn.k_norm.weight": (d,)}
    return {n: (rng.standard_normal(s) * 0.1).astype(np.float32) for n, s in out.items()}


GGUF_NAMES = {
    "model.embed_tokens.weight": "token_embd.weight",
    "model.norm.weight": "output_norm.weight",
    "input_layernorm": "attn_norm",
    "post_attention_layernorm": "ffn_norm",
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "self_attn.q_norm": "attn_q_norm",
    "self_attn.k_norm": "attn_k_norm",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
}


def gguf_name(name: str) -> str:
    if name in GGUF_NAMES:
        return GGUF_NAMES[name]
    _, _, layer, rest = name.split(".", 3)
    module, kind = rest.rsplit(".", 1)
    return f"blk.{layer}.{GGUF_NAMES[module]}.{kind}"


def llama_cpp_permute(w: np.ndarray, n_head: int) -> np.ndarray:
    """llama.cpp's converter's permute of llama q/k rows (convert_hf_to_gguf.py)."""
    return (
        w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:])
        .swapaxes(1, 2)
        .reshape(w.shape)
    )


def q6_k(x: np.ndarray) -> np.ndarray:
    """Q6_K blocks (ql[128], qh[64], scales[16] int8, d f16) with every sub-block scale 1:
    y = d * (q - 32), q in 0..63, d = max|x| / 32 per 256 values."""
    blocks = x.reshape(-1, 256)
    d = (np.abs(blocks).max(1, keepdims=True) / 32).astype(np.float16)
    q = np.clip(np.round(blocks / d.astype(np.float32)) + 32, 0, 63).astype(np.uint8)
    out = np.zeros((len(blocks), 210), np.uint8)
    for half in range(2):
        v = q[:, 128 * half : 128 * half + 128]
        q1, q2, q3, q4 = v[:, :32], v[:, 32:64], v[:, 64:96], v[:, 96:128]
        out[:, 64 * half : 64 * half + 32] = (q1 & 15) | ((q3 & 15) << 4)
        out[:, 64 * half + 32 : 64 * half + 64] = (q2 & 15) | ((q4 & 15) << 4)
        qh = (q1 >> 4) | ((q2 >> 4) << 2) | ((q3 >> 4) << 4) | ((q4 >> 4) << 6)
        out[:, 128 + 32 * half : 160 + 32 * half] = qh
    out[:, 192:208] = 1
    out[:, 208:210] = d.view(np.uint8)
    return out.reshape(x.shape[0], -1)


def q4_k(x: np.ndarray) -> np.ndarray:
    """Q4_K blocks (d f16, dmin f16, scales[12], qs[128]) with every 6-bit scale and min 1:
    y = d * q - dmin, q in 0..15, d = (max - min) / 15, dmin = -min per 256 values."""
    blocks = x.reshape(-1, 256)
    lo, hi = blocks.min(1, keepdims=True), blocks.max(1, keepdims=True)
    d, dmin = ((hi - lo) / 15).astype(np.float16), (-lo).astype(np.float16)
    q = np.clip(np.round((blocks + dmin.astype(np.float32)) / d.astype(np.float32)), 0, 15)
    q = q.astype(np.uint8)
    out = np.zeros((len(blocks), 144), np.uint8)
    out[:, 0:2], out[:, 2:4] = d.view(np.uint8), dmin.view(np.uint8)
    out[:, 4:12] = 1  # scales 0..3, mins 0..3
    out[:, 12:16] = 0x11  # scales and mins 4..7 (low and high nibbles)
    for chunk in range(4):
        v = q[:, 64 * chunk : 64 * chunk + 64]
        out[:, 16 + 32 * chunk : 48 + 32 * chunk] = v[:, :32] | (v[:, 32:] << 4)
    return out.reshape(x.shape[0], -1)


BYTES_PER_BLOCK = {Q.Q2_K: 84, Q.Q3_K: 110, Q.Q5_K: 176}
# Largest error per tensor type, as a fraction of the tensor's max |w| (each with margin): a
# block's scale d covers its own max |w| ≤ the tensor's; rounding costs d/2, clipping one side of
# an asymmetric grid up to d.
TOLERANCE = {
    Q.F32: 0.0,
    Q.F16: 2**-10,  # 11-bit significand
    Q.BF16: 2**-8,  # 8-bit significand
    Q.Q8_0: 1 / 127,  # d = max/127, error d/2 (+ f16 d)
    Q.Q5_0: 1 / 16,  # d = max/16
    Q.Q5_1: 1 / 16,  # d = (max - min)/31
    Q.Q4_0: 1 / 6,  # d = max/8, one side clipped at 7d: error up to d
    Q.Q4_1: 1 / 8,  # d = (max - min)/15
    Q.Q4_K: 1 / 8,  # this file's q4_k: as Q4_1 per 256
    Q.Q6_K: 1 / 16,  # this file's q6_k: d = max/32, clipped at 31d: error up to d
}


def encode(w: np.ndarray, kind: Q, rng: np.random.Generator) -> np.ndarray:
    if kind == Q.Q6_K:
        return q6_k(w)
    if kind == Q.Q4_K:
        return q4_k(w)
    if kind in BYTES_PER_BLOCK:  # random blocks with small f16 scales
        size = BYTES_PER_BLOCK[kind]
        raw = rng.integers(0, 256, (w.size // 256, size), dtype=np.uint8)
        raw[:, -4:] = np.full(2, 0.01, np.float16).view(np.uint8)  # d and dmin/d last
        if kind == Q.Q5_K:
            raw[:, :4] = np.full(2, 0.01, np.float16).view(np.uint8)  # Q5_K: d, dmin first
        return raw.reshape(w.shape[0], -1)
    return gguf.quants.quantize(w, kind)


def write_gguf(path, arch: str, weights: dict, kind: Q = Q.F32, **meta) -> dict:
    """A GGUF of ``weights`` (2-D ones as ``kind``, norms F32) as llama.cpp writes one; the
    encoded tensors by Hugging Face name."""
    rng = np.random.default_rng(1)
    shape = QWEN3_SHAPE if arch == "qwen3" else SHAPE
    writer = gguf.GGUFWriter(str(path), meta.pop("architecture", arch))
    writer.add_block_count(shape["layers"])
    writer.add_context_length(256)
    writer.add_embedding_length(shape["hidden"])
    writer.add_feed_forward_length(shape["inter"])
    writer.add_head_count(shape["heads"])
    writer.add_head_count_kv(shape["kv"])
    if arch == "qwen3":
        writer.add_key_length(shape["head_dim"])
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-6)
    writer.add_tokenizer_model(meta.pop("tokenizer", "gpt2"))
    writer.add_tokenizer_pre("smollm")
    writer.add_token_list(TOKENS)
    writer.add_token_types([1] * (len(TOKENS) - 2) + [3, 3])
    writer.add_token_merges(MERGES)
    writer.add_bos_token_id(len(TOKENS) - 2)
    writer.add_eos_token_id(len(TOKENS) - 1)
    writer.add_chat_template(TEMPLATE)
    encoded = {}
    for name, w in weights.items():
        if arch == "llama" and "q_proj" in name:
            w = llama_cpp_permute(w, SHAPE["heads"])
        elif arch == "llama" and "k_proj" in name:
            w = llama_cpp_permute(w, SHAPE["kv"])
        if w.ndim == 2 and kind != Q.F32:
            encoded[name] = encode(w, kind, rng)
            writer.add_tensor(gguf_name(name), encoded[name], raw_dtype=kind)
        else:
            writer.add_tensor(gguf_name(name), w)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return encoded
