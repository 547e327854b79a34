"""Tests of the rollout loop, the LLM policy, the on-device rollout, trajectory rows."""
