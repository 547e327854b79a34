"""TRL's GRPO trainer on our Sokoban, served through OpenEnv (docs/environments.md §15.1).

The environment runs in its own process, ``arlarena serve sokoban`` (this project's install with
the ``openenv`` extra); this script needs ``trl``, ``datasets``, ``torch`` and ``openenv``
(not the library's dependencies: the optional ``trl`` extra with the ``openenv`` one,
``pip install -e ".[openenv,trl]"``) and talks to it only through OpenEnv's client:

    arlarena serve sokoban --split train --port 8000 &
    python examples/trl_openenv_grpo.py --url http://127.0.0.1:8000 \
        --model ~/.cache/arlarena/models/smollm2-135m-instruct --steps 2

Each prompt is the first room of one episode of the server's train panel (``reset(index=i)``);
the model answers with one move; the reward functions play that move in a fresh reset of the
same episode and return the server's reward (Sokoban's: -0.1 a move, +1 a box on a target,
+10 the win) and, from the step's info, 0.1 when the move was effective (not into a wall).
So every episode is one turn long: a demonstration of the wiring (prompts from the server,
rewards from the server, TRL's GRPO update), not a Sokoban agent; multi-turn play needs TRL's
``rollout_func`` or ``environment_factory``.
"""

from __future__ import annotations

import argparse
import re
import tempfile
from pathlib import Path

from datasets import Dataset
from openenv.core.generic_client import GenericEnvClient
from trl import GRPOConfig, GRPOTrainer

MOVES = ("up", "down", "left", "right")
RULES = (
    "You push boxes in a Sokoban room. # wall, _ floor, O target, X box, √ box on target, "
    "P you, S you on a target. Reply with one word: up, down, left or right."
)


def move_of(completion: str) -> str:
    """The first move word of a reply ("still" when there is none: Sokoban's no-op)."""
    found = re.search(r"\b(up|down|left|right)\b", completion.lower())
    return found.group(1) if found else "still"


def text_of(completion) -> str:
    """A completion's text (conversational completions are lists of messages)."""
    if isinstance(completion, list):
        return " ".join(m["content"] for m in completion if m.get("role") == "assistant")
    return str(completion)


def panel_prompts(client, episodes: int) -> Dataset:
    """One chat prompt per episode of the server's panel: its first room."""
    rows = []
    for index in range(episodes):
        room = client.reset(index=index).observation["text"]
        rows.append(
            {
                "prompt": [
                    {"role": "system", "content": RULES},
                    {"role": "user", "content": f"Room:\n{room}\nYour move?"},
                ],
                "index": index,
            }
        )
    return Dataset.from_list(rows)


def served_rewards(client) -> list:
    """Two TRL reward functions, each completion's move played in its episode on the server:
    the environment's reward, and the step info's ``action_is_effective`` (0.1 for a move that
    moved something; one move rarely scores, so this is what tells the replies apart)."""

    def play(index: int, completion) -> dict:
        client.reset(index=int(index))
        step = client.step({"move": move_of(text_of(completion))})
        return {"reward": float(step.reward), **step.observation["info"]}

    def env_reward(completions, index, **_) -> list[float]:
        return [play(i, c)["reward"] for c, i in zip(completions, index, strict=True)]

    def effective_move(completions, index, **_) -> list[float]:
        played = [play(i, c) for c, i in zip(completions, index, strict=True)]
        return [0.1 if p["action_is_effective"] else 0.0 for p in played]

    return [env_reward, effective_move]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument(
        "--model", default=str(Path.home() / ".cache/arlarena/models/smollm2-135m-instruct")
    )
    parser.add_argument("--episodes", type=int, default=8, help="panel episodes to train on")
    parser.add_argument("--steps", type=int, default=2, help="GRPO steps")
    args = parser.parse_args()
    with GenericEnvClient(base_url=args.url).sync() as client:
        dataset = panel_prompts(client, args.episodes)
        config = GRPOConfig(
            output_dir=tempfile.mkdtemp(prefix="trl-openenv-"),
            max_steps=args.steps,
            per_device_train_batch_size=4,
            num_generations=4,
            max_completion_length=8,
            learning_rate=1e-5,
            logging_steps=1,
            report_to="none",
            use_cpu=True,
            bf16=False,
            save_strategy="no",
            seed=0,
        )
        trainer = GRPOTrainer(
            model=args.model,
            reward_funcs=served_rewards(client),
            args=config,
            train_dataset=dataset,
        )
        trainer.train()
        for row in trainer.state.log_history:
            if "reward" in row:
                print(
                    f"step {row['step']}: env_reward {row['rewards/env_reward/mean']:.3f}, "
                    f"effective_move {row['rewards/effective_move/mean']:.3f}, "
                    f"reward {row['reward']:.3f} (std {row['reward_std']:.3f}), "
                    f"loss {row['loss']:.4f}"
                )


if __name__ == "__main__":
    main()
