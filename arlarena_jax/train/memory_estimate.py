"""A start-up estimate of the memory one step of a run needs, from its config alone.

Sizes such as ``env.group_size=2000000000`` pass every range check yet can never run; without
this check the run builds, clones and evaluates before the first RL step runs out of memory.
:func:`check_memory` adds up the large arrays of each phase the command runs and refuses, in one
:class:`ConfigError` line naming the key that dominates, a config whose estimate exceeds the
machine's memory by more than :data:`MARGIN`.

Notation: ``P`` parameters (:func:`parameter_count`), ``b_p``/``b_c``/``b_kv`` bytes of
``model.param_dtype``/``model.dtype``/``sampler.cache_dtype``; ``L`` layers, ``H`` hidden,
``I`` MLP width, ``h`` query heads, ``k`` KV heads, ``d`` head width, ``V`` vocabulary;
``S = Pp + T`` a row's width, ``Pp = sampler.max_prefill_length`` and ``T`` the response side
(``sampler.max_new_tokens``, ``env.max_right_tokens`` for trajectory rows).

- parameters and optimizer (:func:`state_terms`): ``P·b_p × (c + 1)``, the 1 the sampler's
  copy and, while training, ``c = (5 + r) × (2 with a separate critic)``: weights, 2 AdamW
  moments, 2 gradients (the accumulator and a micro-batch's), ``r = 1`` frozen reference weights
  when the objective reads ``lp_ref``; evaluation alone ``c = 0``; split over ``mesh.fsdp ×
  mesh.tensor``; under ``model.lora`` the moments and gradients are the adapters' only
  (:func:`lora_parameter_count`);
- the sampler's KV cache: ``slots × L × 2 × k × d × (Pp + max_new_tokens) × b_kv``,
  ``slots = sampler.max_concurrent_decodes``; split over the whole mesh;
- one prefill: ``tokens × (h·Pp·4 + (4H + 2I)·b_c)`` with ``tokens =
  max(sampler.prefill_batch_tokens, Pp)`` (float32 scores of a full-width bucket);
- activations of one micro-batch of ``m`` rows (``trainer.micro_batch_size``, ``sft.batch_size``
  for cloning, divided over ``mesh.data × mesh.fsdp``): every layer keeps ``m·S·H·b_c`` under
  ``model.remat`` and ``m·S·(6H + 3I)·b_c`` without; plus one layer's working set ``m·S·(6H +
  3I)·b_c + m·h·S·q·4·2`` (scores and probabilities of a query block ``q``,
  :func:`~arlarena_jax.models.causal_attention.query_block`) and the chunked logits
  ``m·128·V·4·3`` (logits, softmax, gradient);
- the update batch: ``N·S·8`` (ids and mask, int32) ``+ N·T·4·10`` (the ``[N, T]`` float32
  fields of a TurnBatch and the log-prob pass), ``N = env.train_batch_size × env.group_size ×
  env.max_turns`` (× 1 for trajectory rows) rounded up to ``trainer.mini_batch_size``; split
  over ``mesh.data × mesh.fsdp``; under ``env.device_rollout`` the turn arrays ``max_turns · n ·
  (Pp + 2T) · 4`` too;
- rollout rows on the host: ``N·S·40`` bytes (token ids and log-probs as Python objects in
  lists); evaluation's rows: ``min(env.eval_batch_size, trainer.eval_episodes) × max_turns``;
  cloning's examples: ``sft.num_episodes × max_turns × S × 8``.

The widths are the caps, so this is the most a step can need; it leaves out XLA's temporaries
and the environments themselves. A phase's estimate is the sum of its terms; a run needs the
largest phase's. On a CPU every array lives in host memory, so the whole sum (over every device
of the mesh) is compared with the host's RAM. On an accelerator, the per-device part of every
device term is compared with the device's ``bytes_limit`` and the host terms with the host's
RAM. A paper-scale config (Qwen3-4B on ``mesh.fsdp=4``) is thereby checked against the four
accelerators it is meant for; on a CPU host it fails earlier anyway (its mesh needs four
devices, its ``model.path`` a download). Launched as several processes, devices are unknown
before ``jax.distributed.initialize``: only the host terms are checked there.

:data:`MARGIN`: a start is refused only when the estimate is more than twice the memory. The
estimate is rough in both directions (buffers donated or reused, swap, prompts shorter than
their caps), so a config that might fit is never refused; one that needs several times the
machine is refused before anything is built.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from arlarena_jax.errors import ConfigError
from arlarena_jax.models.causal_attention import query_block
from arlarena_jax.models.config import QwenConfig

GIB = 2**30
MARGIN = 2.0  # refuse only an estimate above MARGIN × the memory
LOGIT_CHUNK = 128  # response_log_probs' chunk of positions
ROW_FIELDS = 10  # [N, T] float32 arrays of the update batch (TurnBatch fields, lp, entropy)
HOST_BYTES_PER_TOKEN = 40  # a token id and a log-prob as Python objects in lists
DTYPE_BYTES = {"float32": 4, "bfloat16": 2}


@dataclasses.dataclass(frozen=True)
class Term:
    """One large allocation: its bytes in all, how many devices split it (``shards``), where it
    lives (``host`` or device) and the config keys it grows with (the first is named when the
    values are all at their defaults)."""

    what: str
    bytes: float
    keys: tuple[str, ...]
    shards: int = 1
    host: bool = False


@dataclasses.dataclass(frozen=True)
class Memory:
    """What the machine has: host RAM, and per-device memory on an accelerator (None: the
    devices are the host's CPU, or unknown)."""

    host_bytes: float
    device_bytes: float | None = None
    label: str = "host memory"


def parameter_count(m: QwenConfig) -> int:
    """Weights of the decoder ``m`` describes: the sum of the sizes of the tensors its family
    declares (:meth:`arlarena_jax.models.families.ModelFamily.parameter_count`)."""
    return m.family.parameter_count(m)


def _row_shards(config) -> int:
    return config.mesh.data * config.mesh.fsdp


def _all_shards(config) -> int:
    return config.mesh.data * config.mesh.fsdp * config.mesh.tensor


def _model_key(config) -> str:
    return "model.path" if config.model.path is not None else "model.name"


def lora_parameter_count(lora, m: QwenConfig) -> int:
    """The adapters' parameters: r × (in + out) per targeted linear of every layer (the linears'
    shapes as the config's family declares them)."""
    from arlarena_jax.models.lora import TARGETS

    targeted = {TARGETS[t] for t in lora.targets}
    linears = (t for t in m.family.tensors(m) if t.path[-1] == "kernel")
    return lora.rank * sum(sum(t.shape) for t in linears if t.path[-3:-1] in targeted)


def state_terms(config, model: QwenConfig, *, training: bool, reference: bool, critic: bool):
    """Weights, optimizer moments and gradients (see module doc); under ``model.lora`` the
    moments and gradients are the adapters' only."""
    lora = config.model.lora
    if training and lora is not None:
        return _lora_state_terms(config, model, reference=reference, critic=critic)
    copies = (5 + (1 if reference else 0)) * (2 if critic else 1) if training else 0
    copies += 1  # the sampler's copy
    size = parameter_count(model) * DTYPE_BYTES[config.model.param_dtype]
    what = f"{copies} copies of {parameter_count(model):.3g} parameters (weights, AdamW, grads)"
    shards = config.mesh.fsdp * config.mesh.tensor
    return [Term(what, copies * size, (_model_key(config),), shards)]


def _lora_state_terms(config, model: QwenConfig, *, reference: bool, critic: bool):
    """LoRA: the base's weights (policy, reference, critic) and the sampler's merged copy, and
    the adapters' weights, 2 AdamW moments and 2 gradients."""
    trunks = (1 + (1 if reference else 0)) * (2 if critic else 1)
    size = parameter_count(model) * DTYPE_BYTES[config.model.param_dtype]
    adapters = lora_parameter_count(config.model.lora, model) * (2 if critic else 1)
    adapter_bytes = 5 * adapters * DTYPE_BYTES[config.model.param_dtype]
    shards, key = config.mesh.fsdp * config.mesh.tensor, _model_key(config)
    return [
        Term(
            f"{trunks + 1} copies of {parameter_count(model):.3g} parameters",
            trunks * size + size,
            (key,),
            shards,
        ),
        Term(
            f"LoRA adapters of {adapters:.3g} parameters (weights, AdamW, grads)",
            adapter_bytes,
            ("model.lora.rank",),
            shards,
        ),
    ]


def sampler_terms(config, model: QwenConfig) -> list[Term]:
    """The decode slots' KV cache and one prefill's activations."""
    s, m = config.sampler, model
    length = s.max_prefill_length + s.max_new_tokens
    kv = (
        s.max_concurrent_decodes
        * m.num_hidden_layers
        * 2
        * m.num_key_value_heads
        * m.head_dim
        * length
        * DTYPE_BYTES[s.cache_dtype]
    )
    keys = (
        "sampler.max_concurrent_decodes",
        "sampler.max_prefill_length",
        "sampler.max_new_tokens",
    )
    tokens = max(s.prefill_batch_tokens, s.max_prefill_length)
    per_token = m.num_attention_heads * s.max_prefill_length * 4
    per_token += (4 * m.hidden_size + 2 * m.intermediate_size) * DTYPE_BYTES[config.model.dtype]
    cache = f"the KV cache of {s.max_concurrent_decodes} slots x {length} tokens"
    prefill_keys = ("sampler.prefill_batch_tokens", "sampler.max_prefill_length")
    return [
        Term(cache, kv, keys, _all_shards(config)),
        Term(f"a prefill of {tokens} tokens", tokens * per_token, prefill_keys),
    ]


def activation_terms(config, model: QwenConfig, rows: int, width: int, key: str) -> list[Term]:
    """One micro-batch of ``rows`` rows of ``width`` tokens, forward and backward."""
    m, b = model, DTYPE_BYTES[config.model.dtype]
    local = max(1, rows // _row_shards(config))
    layer = local * width * (6 * m.hidden_size + 3 * m.intermediate_size) * b
    kept = local * width * m.hidden_size * b if config.model.remat else layer
    scores = local * m.num_attention_heads * width * query_block(width) * 4 * 2
    logits = local * LOGIT_CHUNK * m.vocab_size * 4 * 3
    total = m.num_hidden_layers * kept + layer + scores + logits
    keys = (key, "sampler.max_prefill_length", "sampler.max_new_tokens")
    shards = _row_shards(config)
    return [Term(f"activations of {rows} rows x {width} tokens", total * shards, keys, shards)]


def _padded(rows: int, multiple: int) -> int:
    return max(1, -(-rows // multiple)) * multiple


def batch_terms(config, response: int, turn_rows: bool) -> list[Term]:
    """The update batch on the device(s) and the rollout's rows on the host."""
    env, width = config.env, config.sampler.max_prefill_length + response
    episodes = env.train_batch_size * env.group_size
    rows = _padded(episodes * (env.max_turns if turn_rows else 1), config.trainer.mini_batch_size)
    keys = ("env.group_size", "env.train_batch_size")
    keys += ("env.max_turns",) if turn_rows else ()
    keys += ("sampler.max_prefill_length",)
    keys += ("sampler.max_new_tokens",) if turn_rows else ("env.max_right_tokens",)
    shape = (
        f"{env.train_batch_size} groups x {env.group_size} trajectories"
        + (f" x {env.max_turns} turns" if turn_rows else "")
        + f" = {rows:.3g} rows of up to {width} tokens"
    )
    device = rows * width * 8 + rows * response * 4 * ROW_FIELDS
    if env.device_rollout:
        device += env.max_turns * episodes * (config.sampler.max_prefill_length + 2 * response) * 4
    host = rows * width * HOST_BYTES_PER_TOKEN
    return [
        Term(f"the update batch ({shape})", device, keys, _row_shards(config)),
        Term(f"the rollout's rows ({shape})", host, keys, host=True),
    ]


def _eval_rows(config, width: int) -> Term:
    episodes = min(config.env.eval_batch_size, config.trainer.eval_episodes)
    rows = episodes * config.env.max_turns
    what = f"evaluation rows ({episodes} episodes x {config.env.max_turns} turns)"
    smaller = config.env.eval_batch_size <= config.trainer.eval_episodes  # the one that binds
    keys = ("env.eval_batch_size" if smaller else "trainer.eval_episodes", "env.max_turns")
    return Term(what, rows * width * HOST_BYTES_PER_TOKEN, keys, host=True)


def _cloning_examples(config, width: int) -> Term:
    count = config.sft.num_episodes * config.env.max_turns
    what = f"cloning examples ({config.sft.num_episodes} episodes x {config.env.max_turns} turns)"
    return Term(what, count * width * 8, ("sft.num_episodes", "env.max_turns"), host=True)


def phases(
    config,
    model: QwenConfig | None,
    *,
    training: bool = True,
    reference: bool = False,
    critic: bool = False,
) -> dict[str, list[Term]]:
    """The terms of each phase the command runs: ``one RL step`` (training with
    ``trainer.total_steps`` > 0), ``cloning`` (``sft.enabled`` without ``sft.init_from``, or with
    ``sft.continue_steps``) and ``evaluation``. ``model`` None (unreadable): only the terms that
    need no model."""
    from arlarena_jax.train.build import response_width, row_layout

    response, turn_rows = response_width(config), row_layout(config) is None
    width = config.sampler.max_prefill_length + response
    reply_width = config.sampler.max_prefill_length + config.sampler.max_new_tokens
    rl: list[Term] = []
    cloning: list[Term] = []
    evaluation: list[Term] = []
    if model is not None:
        train_state = state_terms(config, model, training=True, reference=False, critic=False)
        micro = config.trainer.micro_batch_size
        rl = state_terms(config, model, training=True, reference=reference, critic=critic)
        rl += sampler_terms(config, model)
        rl += activation_terms(config, model, micro, width, "trainer.micro_batch_size")
        cloning = train_state + activation_terms(
            config, model, config.sft.batch_size, reply_width, "sft.batch_size"
        )
        evaluation = state_terms(config, model, training=False, reference=False, critic=False)
        evaluation += sampler_terms(config, model)
    out: dict[str, list[Term]] = {}
    if training and config.trainer.total_steps > 0:
        out["one RL step"] = [*rl, *batch_terms(config, response, turn_rows)]
    clones = config.sft.init_from is None or config.sft.continue_steps > 0
    if training and config.sft.enabled and clones:
        out["cloning"] = [*cloning, _cloning_examples(config, reply_width)]
    out["evaluation"] = [*evaluation, _eval_rows(config, reply_width)]
    return out


def _value(config, key: str):
    section = config
    for part in key.split("."):
        section = getattr(section, part)
    return section


def dominant_key(config, term: Term) -> str:
    """The key of ``term`` set furthest above its default (value / default; the first key when
    none is above it)."""
    from arlarena_jax.train.config import Config

    default = Config()

    def ratio(key: str) -> float:
        value, base = _value(config, key), _value(default, key)
        numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in (value, base))
        return value / base if numeric and base > 0 else 1.0

    return max(term.keys, key=ratio)


def _over(need: float, budget: float, label: str, phase: str, terms: Sequence[Term], config):
    """Raise the one line when ``need`` exceeds :data:`MARGIN` × ``budget``."""
    if need <= MARGIN * budget or not terms:
        return
    largest = max(terms, key=lambda t: t.bytes / (1 if t.host else t.shards))
    raise ConfigError(
        f"config key {dominant_key(config, largest)!r}: {phase} needs about {need / GIB:.3g} GiB "
        f"({largest.what}: {largest.bytes / GIB:.3g} GiB), more than {MARGIN:g}x this machine's "
        f"{budget / GIB:.3g} GiB {label}"
    )


def check_memory(config, model: QwenConfig | None, memory: Memory, **kinds: bool) -> None:
    """Refuse (one ConfigError line naming the dominant key) a config whose estimate exceeds
    ``memory`` by more than :data:`MARGIN`: on a CPU (``memory.device_bytes`` None) the sum of
    every term against host memory; on an accelerator the device terms per device against
    ``device_bytes`` and the host terms against host memory. ``kinds``: :func:`phases`'."""
    for phase, terms in phases(config, model, **kinds).items():
        if memory.device_bytes is None:
            need = sum(t.bytes for t in terms)
            _over(need, memory.host_bytes, memory.label, phase, terms, config)
            continue
        device = [t for t in terms if not t.host]
        need = sum(t.bytes / t.shards for t in device)
        _over(need, memory.device_bytes, "memory per device", phase, device, config)
        host = [t for t in terms if t.host]
        _over(sum(t.bytes for t in host), memory.host_bytes, "host memory", phase, host, config)


def host_memory() -> float:
    """The memory this process may use, in bytes (``MemTotal``, or its cgroup's limit where
    lower: :func:`arlarena_base.host_memory.host_memory_mb`)."""
    from arlarena_base.host_memory import host_memory_mb

    return float(host_memory_mb() * 2**20)


def machine_memory(devices_known: bool = True) -> Memory:
    """Host RAM, and on an accelerator the first device's ``bytes_limit``. ``devices_known``
    False (several processes, before ``jax.distributed.initialize``): a memory with device
    memory infinite, so only host terms can refuse."""
    if not devices_known:
        return Memory(host_memory(), float("inf"))
    import jax

    device = jax.devices()[0]
    stats = device.memory_stats() if device.platform != "cpu" else None
    limit = (stats or {}).get("bytes_limit")
    return Memory(host_memory(), float(limit) if limit else None)


def check_config_memory(config, *, training: bool = True, devices_known: bool = True) -> None:
    """:func:`check_memory` of ``config`` on this machine (what a command runs at start-up)."""
    from arlarena_jax.objectives.declare import Input
    from arlarena_jax.train.build import build_objective
    from arlarena_jax.train.resolution import resolve_run

    run = resolve_run(config)
    needs = build_objective(run).requirements
    check_memory(
        run.config,
        run.architecture,
        machine_memory(devices_known),
        training=training,
        reference=Input.REF_LOG_PROBS in needs,
        critic=Input.VALUES in needs and run.config.critic.model == "separate",
    )
