"""``arlarena`` as one process of a multi-process run whose host is slow once: on the process
named by ``SLOW_SANDBOX_PROCESS``, one episode of the first training step runs a snippet that
sleeps past the sandbox's timeout (in place of the model's response: a tiny model rarely writes a
whole code block), so the real sandbox kills it and the episode observes ``Timeout`` on that
process only (issue 65: a host's wall clock must not make the processes
diverge). Every process prints a digest of each whole training rollout it holds after the
gather, and whether a ``Timeout`` observation is in it, so a test can check that all hold the
same one.

    python tests/helpers/slow_sandbox.py train CONFIG key=value ...
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

SLEEPER = "```python\nimport time\ntime.sleep(600)\n```"  # a code turn, as the model writes one
TIMEOUT_OBSERVATION = "Code execution result: Timeout"


def slow_first_snippet() -> None:
    """On this process, the first running episode of the first training step runs a snippet
    that sleeps past the sandbox's timeout instead of the model's response (see module doc;
    cloning's expert and the evaluations step the environment too, outside ``collect_batch``)."""
    from arlarena_jax.train import rl_step
    from envs.math.env import MathBatch

    step, collect_batch, left, training = MathBatch.step, rl_step.collect_batch, [1], [False]

    def collecting(*args, **kwargs):
        training[0] = True
        try:
            return collect_batch(*args, **kwargs)
        finally:
            training[0] = False

    def stepping(self, actions):
        actions = list(actions)
        running = [i for i, e in enumerate(self._episodes) if not e.done]
        if left[0] and training[0] and running:
            left[0] = 0
            actions[running[0]] = SLEEPER
            result = step(self, actions)
            status = result.infos[running[0]].get("exec_status")
            print(f"slow sandbox: the snippet ended {status!r}", flush=True)
            return result
        return step(self, actions)

    MathBatch.step = stepping
    rl_step.collect_batch = collecting


def rollout_digest(rollout) -> str:
    """A digest of what the update reads of a rollout: every row's text, tokens, behaviour
    log-probs, reward and place."""
    h = hashlib.sha256()
    for r in rollout.rows:
        fields = (r.prompt, r.response, r.reward, r.group, r.trajectory, r.env_index, r.turn)
        h.update(repr((fields, list(r.response_ids), [float(x) for x in r.log_probs])).encode())
    return h.hexdigest()[:16]


def print_whole_rollouts() -> None:
    """Print the digest of every gathered training rollout (rl.whole_rollout)."""
    from arlarena_jax.train import rl

    original = rl.whole_rollout

    def whole_rollout(*args, **kwargs):
        rollout = original(*args, **kwargs)
        timeout = any(
            r.info.get("exec_status") == "timeout" or TIMEOUT_OBSERVATION in r.response
            for r in rollout.rows
        )
        print(f"whole rollout {rollout_digest(rollout)} timeout={timeout}", flush=True)
        return rollout

    rl.whole_rollout = whole_rollout


if __name__ == "__main__":
    if os.environ.get("ARLARENA_PROCESS_ID") == os.environ.get("SLOW_SANDBOX_PROCESS"):
        slow_first_snippet()
    print_whole_rollouts()
    from arlarena_jax.cli import main

    sys.exit(main(sys.argv[1:]))
