"""Checks of the smoke run that ``.ci/run`` trains in the user's environment (``pip install -e .``).

Run in the test environment, which has ``tensorboard`` and ``torch``:

    python .ci/check_run.py RUN_DIR DEMOS.jsonl EVAL.log

* TensorBoard: the event file reads back with TensorBoard's own reader and holds the cloning
  loss (which at least halves: 100 steps take the tiny model from about 5 to about 0.2), the RL
  step's actor metrics and the held-out success;
* checkpoint: the newest orbax step is the last RL step, and ``arlarena eval`` (whose output is
  ``EVAL.log``) restored it and measured the same held-out success as the run's final evaluation
  (the same evaluation seeds and sampler seeds);
* Hugging Face export: ``transformers`` loads it as ``Qwen3ForCausalLM`` with its tokenizer, chat
  template and generation config; on the expert prompts of ``arlarena gen-data`` (``DEMOS.jsonl``)
  its chat template gives our prompt ids, its logits equal ours within 1e-4 (float32, another
  implementation), and greedy ``generate`` with the export's own generation config gives exactly
  our sampler's greedy tokens, stopping at the same token.

Exits 1 naming the first check that fails.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import numpy as np
import torch
import transformers
from tensorboard.backend.event_processing import event_accumulator

from arlarena_jax.models import load_pretrained
from arlarena_jax.rollout.policy import chat_prompt_ids
from arlarena_jax.sampler import GREEDY, Engine, EngineConfig, Request, generate
from arlarena_jax.tokenization import load_tokenizer, stop_token_ids
from arlarena_jax.train.config_io import load_config


class CheckFailed(Exception):
    pass


def check(condition: bool, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


def tensorboard_scalars(run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    files = sorted((run_dir / "tensorboard").glob("events.out.tfevents.*"))
    check(bool(files), f"no TensorBoard event file in {run_dir / 'tensorboard'}")
    acc = event_accumulator.EventAccumulator(str(run_dir / "tensorboard"), size_guidance={})
    acc.Reload()
    scalars = {  # a step redone after a resume counts once, with its last value
        tag: sorted({e.step: e.value for e in acc.Scalars(tag)}.items())
        for tag in acc.Tags()["scalars"]
    }
    for tag in ("sft/loss", "actor/pg_loss", "actor/grad_norm", "test/success_rate"):
        check(bool(scalars.get(tag)), f"TensorBoard has no {tag!r} scalars")
        check(all(np.isfinite(v) for _, v in scalars[tag]), f"a non-finite {tag!r} scalar")
    losses = [v for _, v in scalars["sft/loss"]]
    check(
        losses[-1] < 0.5 * losses[0], f"cloning did not learn: sft/loss {losses[0]} -> {losses[-1]}"
    )
    return scalars


def check_checkpoint(run_dir: Path, total_steps: int, final_success: float, eval_log: str):
    steps = sorted(int(p.name) for p in (run_dir / "checkpoints").iterdir() if p.name.isdigit())
    check(bool(steps) and steps[-1] == total_steps, f"checkpoint steps {steps}, want {total_steps}")
    check(
        f"checkpoint step {total_steps}," in eval_log,
        f"arlarena eval did not restore checkpoint step {total_steps}",
    )
    found = re.search(r"test/success_rate\s+([0-9.]+)", eval_log)
    check(found is not None, "arlarena eval printed no test/success_rate")
    check(
        abs(float(found.group(1)) - final_success) < 1e-4,
        f"arlarena eval measured {found.group(1)}, the run's final evaluation {final_success}",
    )


def our_greedy(model, prompt: list[int], stops: tuple[int, ...], budget: int) -> list[int]:
    config = EngineConfig(
        max_concurrent_decodes=1,
        max_prefill_length=len(prompt),
        max_new_tokens=budget,
        stop_token_ids=stops,
    )
    engine = Engine(model, config, sampling=GREEDY)
    ((completion,),) = generate(engine, [Request(prompt, max_new_tokens=budget)])
    return completion.token_ids


def check_export(export: Path, prompts: list[str], budget: int) -> int:
    """The export against our own model; returns how many greedy replies stopped early."""
    hf = transformers.AutoModelForCausalLM.from_pretrained(export).eval()
    check(type(hf).__name__ == "Qwen3ForCausalLM", f"transformers loads a {type(hf).__name__}")
    hf_tokenizer = transformers.AutoTokenizer.from_pretrained(export)
    check(bool(hf_tokenizer.chat_template), "the exported tokenizer has no chat template")
    generation = transformers.GenerationConfig.from_pretrained(export)
    tokenizer = load_tokenizer(export)
    stops = stop_token_ids(tokenizer, export)
    check(generation.eos_token_id == list(stops), f"eos ids {generation.eos_token_id} != {stops}")
    check(generation.max_new_tokens == budget, f"max_new_tokens {generation.max_new_tokens}")
    ours = load_pretrained(export)
    stopped_early = 0
    for text in prompts:
        prompt = chat_prompt_ids(tokenizer, text)
        rendered = hf_tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=False
        )
        check(hf_tokenizer.encode(rendered) == prompt, "the chat templates render differently")
        with torch.no_grad():
            hf_logits = hf(torch.tensor([prompt])).logits[0].numpy()
            out = hf.generate(torch.tensor([prompt]), do_sample=False)[0, len(prompt) :].tolist()
        our_logits = np.asarray(ours(np.array([prompt]), np.ones((1, len(prompt)), bool))[0])
        gap = float(np.abs(hf_logits - our_logits).max())
        check(gap < 1e-4, f"logits differ from transformers by {gap:.2e}")
        mine = our_greedy(ours, prompt, stops, budget)
        check(out == mine, f"greedy replies differ: transformers {out}, ours {mine}")
        stopped_early += len(mine) < budget and mine[-1] in stops
    return stopped_early


def main(run_dir: str, demos: str, eval_log: str) -> int:
    run = Path(run_dir)
    config = load_config(run / "config.yaml")
    scalars = tensorboard_scalars(run)
    total = config.trainer.total_steps
    check([s for s, _ in scalars["actor/pg_loss"]] == list(range(1, total + 1)), "RL steps")
    final_success = scalars["test/success_rate"][-1][1]
    check_checkpoint(run, total, final_success, Path(eval_log).read_text())
    prompts = [json.loads(line)["prompt"] for line in Path(demos).read_text().splitlines()][:4]
    check(len(prompts) == 4, f"{demos} holds {len(prompts)} expert turns, want at least 4")
    stopped = check_export(run / "hf", prompts, config.sampler.max_new_tokens)
    print(
        f"smoke run checked: {len(scalars)} TensorBoard tags, checkpoint step {total} restored by "
        f"arlarena eval (held-out success {final_success:.3f} both), Hugging Face export = ours "
        f"(logits, chat template, greedy replies: {stopped} of {len(prompts)} stopped at a stop id)"
    )
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main(*sys.argv[1:]))
    except CheckFailed as failure:
        print(f"smoke run check failed: {failure}")
        sys.exit(1)
