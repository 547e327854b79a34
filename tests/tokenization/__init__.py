"""Tests of the tokenizers and vocabularies."""
