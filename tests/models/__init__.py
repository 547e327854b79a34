"""Tests of the decoders, their I/O (HF, GGUF), LoRA, sharding, value models."""
