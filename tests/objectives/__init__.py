"""Tests of the objective components: advantages, ratios, aggregation, regularizers, presets."""
