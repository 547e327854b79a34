"""Tests of the trainer's parts (config, resolution, update, checkpoints, evaluation) and of the
run on the tiny Sokoban config."""
