"""GGUF import on tiny files written by ``gguf.GGUFWriter`` from random weights.

* one file per tensor type: every imported weight is within that type's quantization error of
  the weight written (bounds below, from each format's block layout), llama's q/k rows
  un-permuted; Q4_K and Q6_K blocks are written by this file's own quantizers (``gguf`` cannot
  quantize K-quants), Q2_K/Q3_K/Q5_K blocks are random bytes checked against ``gguf``'s
  dequantizer (wiring and layout only);
* float32 files of each architecture: our logits equal transformers' GGUF load within 1e-4;
* the tokenizer built from the file's vocabulary splits digits as llama.cpp's ``smollm``;
* an unsupported architecture, tensor type or tokenizer is one line naming it.
"""

from __future__ import annotations

import json

import gguf
import numpy as np
import pytest
from gguf import GGMLQuantizationType as Q

from arlarena_jax.models.gguf_import import import_gguf
from arlarena_jax.models.hf_io import load_pretrained, load_safetensors_file
from arlarena_jax.tokenization import load_tokenizer
from tests.helpers.gguf_files import (
    BYTE_CHARS,
    BYTES_PER_BLOCK,
    QWEN3_SHAPE,
    SHAPE,
    TOKENS,
    TOLERANCE,
    hf_weights,
    write_gguf,
)


@pytest.mark.parametrize("kind", list(TOLERANCE), ids=lambda k: k.name)
def test_each_tensor_type_imports_within_its_quantization_error(tmp_path, kind):
    weights = hf_weights("llama", np.random.default_rng(0))
    write_gguf(tmp_path / "m.gguf", "llama", weights, kind)
    got = load_safetensors_file(
        import_gguf(tmp_path / "m.gguf", tmp_path / "hf") / "model.safetensors"
    )
    assert set(got) == set(weights)
    for name, w in weights.items():
        bound = TOLERANCE[kind] * np.abs(w).max() if w.ndim == 2 else 0.0
        err = np.abs(got[name] - w).max()
        assert got[name].dtype == np.float32 and err <= bound, (name, err, bound)


@pytest.mark.parametrize("kind", list(BYTES_PER_BLOCK), ids=lambda k: k.name)
def test_other_k_quants_are_dequantized_by_gguf(tmp_path, kind):
    weights = hf_weights("qwen2", np.random.default_rng(0))
    encoded = write_gguf(tmp_path / "m.gguf", "qwen2", weights, kind)
    got = load_safetensors_file(
        import_gguf(tmp_path / "m.gguf", tmp_path / "hf") / "model.safetensors"
    )
    for name, raw in encoded.items():
        np.testing.assert_array_equal(got[name], gguf.quants.dequantize(raw, kind))


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3"])
def test_logits_equal_transformers_gguf_load(tmp_path, arch):
    torch = pytest.importorskip("torch")
    from transformers import AutoModelForCausalLM

    weights = hf_weights(arch, np.random.default_rng(2))
    write_gguf(tmp_path / "m.gguf", arch, weights)
    out = import_gguf(tmp_path / "m.gguf", tmp_path / "hf")
    ids = np.random.default_rng(3).integers(0, len(TOKENS), (2, 12))
    ref = AutoModelForCausalLM.from_pretrained(tmp_path, gguf_file="m.gguf", dtype=torch.float32)
    with torch.no_grad():
        expected = ref(torch.from_numpy(ids)).logits.numpy()
    np.testing.assert_allclose(np.asarray(load_pretrained(out)(ids)), expected, atol=1e-4)
    config = json.loads((out / "config.json").read_text())
    assert config["model_type"] == arch and config["tie_word_embeddings"] is True
    head_dim = (QWEN3_SHAPE if arch == "qwen3" else SHAPE)["head_dim"]
    assert config["rms_norm_eps"] == 1e-6 and config["head_dim"] == head_dim


def test_tokenizer_from_the_vocabulary(tmp_path):
    write_gguf(tmp_path / "m.gguf", "llama", hf_weights("llama", np.random.default_rng(0)))
    out = import_gguf(tmp_path / "m.gguf", tmp_path / "hf")
    tok = load_tokenizer(out)
    n = len(TOKENS)
    # "hello world": h e l l o → he ll o → hell o; " w" merges; the rest are single bytes.
    assert tok.convert_ids_to_tokens(tok("hello world")["input_ids"]) == [
        "hell", "o", "Ġw", "o", "r", "l", "d",
    ]  # fmt: skip
    # smollm splits every digit off first, so the two spaces before "1" stay one piece.
    assert tok("a  12")["input_ids"] == [BYTE_CHARS.index(c) for c in ("a", "Ġ", "Ġ")] + [
        BYTE_CHARS.index("1"),
        BYTE_CHARS.index("2"),
    ]
    assert tok("<|im_end|>")["input_ids"] == [n - 1]
    assert tok.eos_token == "<|im_end|>" and tok.bos_token == "<|im_start|>"
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False)
    assert text == "<|im_start|>user\nhi<|im_end|>\n"
    gen = json.loads((out / "generation_config.json").read_text())
    assert gen["eos_token_id"] == [n - 1] and gen["do_sample"] is False


@pytest.mark.parametrize(
    ("meta", "message"),
    [
        (dict(architecture="gpt2"), "GGUF architecture 'gpt2' is not supported"),
        (dict(tokenizer="llama"), "GGUF tokenizer.ggml.model 'llama' is not supported"),
    ],
)
def test_unsupported_file_is_one_line(tmp_path, meta, message):
    write_gguf(tmp_path / "m.gguf", "llama", hf_weights("llama", np.random.default_rng(0)), **meta)
    with pytest.raises(ValueError, match=message) as info:
        import_gguf(tmp_path / "m.gguf", tmp_path / "hf")
    assert "\n" not in str(info.value)


def test_unsupported_tensor_type_is_one_line(tmp_path):
    weights = hf_weights("llama", np.random.default_rng(0))
    write_gguf(tmp_path / "m.gguf", "llama", weights, Q.Q5_K)
    from arlarena_jax.models import gguf_import

    with pytest.raises(ValueError, match=r"has type Q5_K, which the importer does not read"):
        original = gguf_import.SUPPORTED_TYPES
        try:
            gguf_import.SUPPORTED_TYPES = tuple(t for t in original if t != "Q5_K")
            import_gguf(tmp_path / "m.gguf", tmp_path / "hf")
        finally:
            gguf_import.SUPPORTED_TYPES = original


def test_cli_import_error_is_one_line(tmp_path, capsys):
    from arlarena_jax.cli import main

    write_gguf(
        tmp_path / "m.gguf",
        "llama",
        hf_weights("llama", np.random.default_rng(0)),
        architecture="gpt2",
    )
    with pytest.raises(SystemExit) as info:
        main(["model", "import", str(tmp_path / "m.gguf"), str(tmp_path / "hf")])
    err = capsys.readouterr().err.strip()
    assert info.value.code == 2 and err.count("\n") == 0 and "'gpt2' is not supported" in err
