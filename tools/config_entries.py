"""How often the config module is entered on the way from ``arlarena train`` to the first RL
step (issue 64: "one resolution").

Runs ``arlarena train CONFIG OVERRIDES...`` in this process under a profiler that counts every
call into a function of ``arlarena_jax/train/config.py`` (and of the modules named by
``--module``) from code outside them, and stops the run as the first RL step begins. Prints the
total, the entries per function, and how many times the config was resolved and validated.

    python tools/config_entries.py                 # the main job, its cloning cut to 2 steps
    python tools/config_entries.py configs/textworld/smollm2_base.yaml env.textworld.train_games=2
"""

from __future__ import annotations

import argparse
import collections
import sys
from pathlib import Path

QUICK = [
    "sft.steps=2",
    "sft.num_episodes=8",
    "trainer.eval_at_start=false",
    "trainer.eval_episodes=8",
    "trainer.save_every=0",
    "trainer.export_hf=false",
]


# The work of resolving and checking, counted from any caller: the method's settings
# (method_settings before the resolution module, _method_settings after it) and the
# cross-field checks (validate before; check after, which validate calls).
WORK = {"method_settings", "_method_settings", "validate", "check"}
WORK_FILES = tuple(
    str(Path(f"arlarena_jax/train/{m}.py")) for m in ("config", "config_checks", "resolution")
)


class FirstStep(BaseException):
    """Raised by the profiler as the first RL step begins."""


def count_entries(argv: list[str], modules: list[str]) -> collections.Counter:
    """Entries (calls from outside ``modules``) per ``module:function`` while ``arlarena``
    runs ``argv``, up to the first RL step."""
    from arlarena_jax.cli import main

    counts: collections.Counter = collections.Counter()
    suffixes = tuple(str(Path(m)) for m in modules)
    work = collections.Counter()  # WORK's functions, from any caller

    def profile(frame, event, _arg):
        if event != "call":
            return
        code = frame.f_code
        if code.co_name == "step" and code.co_filename.endswith(str(Path("train/run.py"))):
            raise FirstStep
        if code.co_name in WORK and code.co_filename.endswith(WORK_FILES):
            work[code.co_name] += 1
        caller = frame.f_back
        inside = caller is not None and caller.f_code.co_filename.endswith(suffixes)
        if code.co_filename.endswith(suffixes) and not inside:  # entered from outside
            counts[f"{Path(code.co_filename).name}:{code.co_name}"] += 1

    sys.setprofile(profile)
    try:
        main(argv)
    except FirstStep:
        pass
    finally:
        sys.setprofile(None)
    return counts, work


def main_() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("config", nargs="?", default="configs/sokoban/sampo_tiny.yaml")
    parser.add_argument("overrides", nargs="*")
    parser.add_argument("--module", action="append", default=[])
    parser.add_argument("--run-dir", default="/tmp/config_entries_run")
    args = parser.parse_args()
    args.module = args.module or [
        f"arlarena_jax/train/{m}.py" for m in ("config", "config_checks", "resolution")
    ]
    import shutil

    shutil.rmtree(args.run_dir, ignore_errors=True)
    argv = ["train", args.config, *QUICK, *args.overrides, f"trainer.run_dir={args.run_dir}"]
    counts, work = count_entries(argv, args.module)
    for name, n in counts.most_common():
        print(f"{n:6d}  {name}")
    print(f"entries into {', '.join(args.module)}: {sum(counts.values())}")
    settings = work["method_settings"] + work["_method_settings"]
    print(f"method settings resolved: {settings} times")
    checked = work["check"] or work["validate"]  # validate calls check where check exists
    print(f"config checked across fields: {checked} times")


if __name__ == "__main__":
    main_()
