"""Tests of whole runs across layers: each environment's trainer, SmolLM2, the paper-scale smoke."""
