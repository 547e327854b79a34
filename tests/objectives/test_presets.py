"""Method presets as typed settings: declared knobs are exactly what a builder reads, and every
setting a preset reads changes its objective when overridden."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from arlarena_jax import objectives as obj
from arlarena_jax.objectives.presets import PRESETS, MethodSettings, settings


class Recording:
    """A MethodSettings that records which fields are read."""

    def __init__(self, inner: MethodSettings) -> None:
        self._inner, self.read = inner, set()

    def __getattr__(self, name: str):
        self.read.add(name)
        return getattr(self._inner, name)


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_declared_knobs_are_what_the_builder_reads(name):
    """Every field is read except switched-off branches' (e.g. seq_mask_delta with masking off),
    so the preset is built with every switch on as well."""
    preset = PRESETS[name]
    read: set[str] = set()
    every_switch = {
        "use_seq_mask": True,
        "use_kl_loss": True,
        "dynamic_sampling": True,
        "use_kl_in_reward": True,
        "kl_in_reward_target": 0.1,
        "rollout_is": "sequence",
        "rollout_rs": "geometric",
    }
    for switches in ({}, every_switch):
        recording = Recording(settings(name, **switches))
        preset.build(recording)
        read |= recording.read
    assert read == set(preset.knobs), name
    assert set(preset.defaults) <= set(preset.knobs), name


@pytest.mark.parametrize("name", sorted(PRESETS))
def test_presets_name_only_fields_of_the_settings(name):
    fields = {f.name for f in dataclasses.fields(MethodSettings)}
    assert set(PRESETS[name].knobs) <= fields


def test_switches_add_and_remove_components():
    grpo = obj.presets.build("grpo", use_kl_loss=False, use_seq_mask=True, dynamic_sampling=True)
    assert [r.name for r in grpo.regularizers] == ["entropy"]
    assert [m.name for m in grpo.mask_transforms] == ["sequence_mask"]
    assert grpo.group_filter == obj.GroupFilter(max_num_gen_batches=3, cold_start_steps=0)
    sampo = obj.presets.build("sampo", dynamic_sampling=False, loss_agg_mode="token-mean")
    assert sampo.group_filter is None and sampo.aggregation.name == "token-mean"


def test_a_clip_override_changes_the_loss():
    """GSPO's clip on TV-2's batch: widening ε_high to 10 unclips every row, so the loss differs
    from SAMPO's default 4e-3 (a smoke check that the setting reaches the component)."""
    from tests.helpers.spec_vectors import TV2_ENTROPY, TV2_LP, tv2_batch

    batch = tv2_batch()
    default = float(obj.presets.build("gspo").loss(TV2_LP, batch, TV2_ENTROPY)[0])
    wide = obj.presets.build("gspo", clip_low=10.0, clip_high=10.0)
    assert not np.isclose(float(wide.loss(TV2_LP, batch, TV2_ENTROPY)[0]), default)


def test_kl_in_the_reward_composes_with_ppo():
    """``use_kl_in_reward`` adds the shaper (reference log-probs declared, so the trainer keeps a
    reference); a target KL makes β adaptive."""
    plain = obj.presets.build("ppo")
    shaped = obj.presets.build("ppo", use_kl_in_reward=True, kl_in_reward_coef=0.01)
    assert obj.Input.REF_LOG_PROBS not in plain.requirements
    assert {obj.Input.REF_LOG_PROBS, obj.Input.VALUES} <= shaped.requirements
    assert [s.name for s in shaped.shapers][-1] == "kl_in_reward"
    assert float(shaped.init_state()[-1]["kl_reward_coef"]) == pytest.approx(0.01)
    with pytest.raises(ValueError, match="kl_in_reward_target must be > 0"):
        settings("ppo", use_kl_in_reward=True, kl_in_reward_target=0.0)
