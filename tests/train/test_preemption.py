"""Stopping and resuming: SIGTERM or SIGINT stops ``arlarena train`` in every phase with status 75
and one line, after saving what the next start needs; the same command then continues.

The trainer test (one run directory, stopped three times): ``arlarena train`` is started as a
subprocess and signalled when its output shows the phase has begun (no timing guesses): during
cloning (after the "[cloning 10]" line, of 14 steps), during the evaluation after cloning (two
evaluation chunks, so a check comes after the chunk the signal lands in) and in the RL loop
(SIGINT). A fourth, uninterrupted start finishes the run. The cloning it continued equals an
uninterrupted cloning exactly (same parameters), since the cloning state saved on the stop holds
parameters, optimizer state and the step, and the step fixes the position in the batch stream.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import threading

import jax
import numpy as np
import orbax.checkpoint as ocp
import pytest
from flax import nnx

from arlarena_jax.models import QwenForCausalLM, preset
from arlarena_jax.tokenization import train_tiny
from arlarena_jax.train.build import build_tokenizer
from arlarena_jax.train.checkpoint import Checkpointer, abstract_like
from arlarena_jax.train.config_io import load_config
from arlarena_jax.train.loop import EXIT_STOPPED, summary_table, train
from arlarena_jax.train.run import Run
from arlarena_jax.train.sft import CloneState, prepare_sft
from tests.helpers.tiny_runs import SAMPO_TINY as CONFIG
from tests.helpers.tiny_runs import SMALL as TRAINER_SMALL

SMALL = [  # test_trainer's sizes; later overrides win
    *TRAINER_SMALL,
    "sft.steps=14",
    "sft.batch_size=4",
    "env.eval_batch_size=2",  # two evaluation chunks
    "trainer.eval_every=0",
    "trainer.total_steps=1",
]


@pytest.fixture(scope="module")
def shared(tmp_path_factory):
    """The tiny-sokoban tokenizer, built once (saves ~10 s a start)."""
    directory = tmp_path_factory.mktemp("shared")
    build_tokenizer(load_config(CONFIG, SMALL)).save_pretrained(directory / "tokenizer")
    return directory


def overrides(shared, run_dir) -> list[str]:
    return [*SMALL, f"model.tokenizer={shared / 'tokenizer'}", f"trainer.run_dir={run_dir}"]


def arlarena_train(shared, run_dir, marker: str, sig: int, *extra: str) -> tuple[int, str]:
    """Start ``arlarena train`` on ``run_dir`` (overrides: SMALL, then ``extra``), send ``sig``
    once a line contains ``marker``; (exit status, all output)."""
    argv = [CONFIG, *overrides(shared, run_dir), *extra]
    proc = subprocess.Popen(  # the session's compilation cache and flags (tests/conftest.py)
        [sys.executable, "-m", "arlarena_jax", "train", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    watchdog = threading.Timer(240, proc.kill)
    watchdog.start()
    lines = []
    try:
        for line in proc.stdout:
            lines.append(line)
            if marker in line:
                proc.send_signal(sig)
                break
        lines.append(proc.communicate()[0])
    finally:
        watchdog.cancel()
    return proc.returncode, "".join(lines)


def stop_lines(output: str) -> list[str]:
    return [line for line in output.splitlines() if "stopped by" in line]


def saved_params(step_dir):
    """The parameters of an RL checkpoint step, as stored (numpy leaves)."""
    return ocp.StandardCheckpointer().restore(step_dir / "state")["params"]


@pytest.fixture(scope="module")
def stopped_thrice(shared, tmp_path_factory):
    run_dir = tmp_path_factory.mktemp("preempted")
    stops = {}
    stops["cloning"] = arlarena_train(shared, run_dir, "[cloning 10]", signal.SIGTERM)
    sft_steps = sorted(p.name for p in (run_dir / "checkpoints_sft").iterdir())
    stops["evaluation"] = arlarena_train(shared, run_dir, "cloning done", signal.SIGTERM)
    cloned = saved_params(run_dir / "checkpoints" / "0")
    stops["RL"] = arlarena_train(shared, run_dir, "held-out success before RL", signal.SIGINT)
    return run_dir, stops, sft_steps, cloned


def test_a_stop_in_each_phase_exits_75_with_one_line_and_a_checkpoint(stopped_thrice):
    run_dir, stops, sft_steps, _ = stopped_thrice
    status, output = stops["cloning"]
    assert status == EXIT_STOPPED, output
    (line,) = stop_lines(output)
    assert line.startswith("arlarena: stopped by SIGTERM during cloning at step ")
    assert line.endswith(" of 14; run the same command to resume")
    step = int(line.split(" at step ")[1].split()[0])
    assert 10 <= step < 14 and sft_steps == [str(step)]
    assert "held-out success after" not in output  # no summary table

    status, output = stops["evaluation"]
    assert status == EXIT_STOPPED, output
    assert "cloning: 14 steps on" in output and f"continuing after step {step}" in output
    assert stop_lines(output) == [
        "arlarena: stopped by SIGTERM during evaluation at step 0 of 1; "
        "run the same command to resume"
    ]
    assert "held-out success before RL" not in output

    status, output = stops["RL"]
    assert status == EXIT_STOPPED, output
    assert "cloning:" not in output  # resumed from the cloned policy, saved as step 0
    assert stop_lines(output) == [
        "arlarena: stopped by SIGINT during RL at step 1 of 1; run the same command to resume"
    ]
    assert (run_dir / "checkpoints" / "1").is_dir()
    assert not (run_dir / "checkpoints_sft").exists()  # gone once step 0 holds the cloned policy


def test_the_same_command_then_finishes_the_run(shared, stopped_thrice):
    run_dir, *_ = stopped_thrice
    summary = train(load_config(CONFIG, overrides(shared, run_dir)), console=False)
    assert summary.stopped is None and summary.steps == 1 and summary.history == []
    assert summary.success_after_cloning is not None and summary.success_after_rl is not None
    assert "stopped" not in summary_table(summary)


@pytest.fixture(scope="module")
def uninterrupted_clone(shared, tmp_path_factory):
    """The parameters of the cloning of SMALL, uninterrupted, as saved at step 0."""
    run_dir = tmp_path_factory.mktemp("uninterrupted_clone")
    with Run(load_config(CONFIG, overrides(shared, run_dir)), console=False) as run:
        run.clone()
        run.save(force=True)
        run.checkpointer.wait()
    return saved_params(run_dir / "checkpoints" / "0")


def assert_same_params(got, want) -> None:
    """Bitwise equal: the same jitted steps on the same batches, from the same saved state."""
    leaves = jax.tree.leaves(got)
    assert len(leaves) == len(jax.tree.leaves(want)) > 0
    for a, b in zip(leaves, jax.tree.leaves(want), strict=True):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_continued_cloning_equals_an_uninterrupted_cloning(stopped_thrice, uninterrupted_clone):
    *_, cloned = stopped_thrice
    assert_same_params(cloned, uninterrupted_clone)


def test_a_cloning_killed_hard_continues_from_its_last_save(
    shared, tmp_path, monkeypatch, uninterrupted_clone
):
    """SIGKILL (no handler runs) after cloning step 10 of 14, with ``sft.save_every_s`` tiny
    (a save after every step): the next start reads the kept demonstrations (playing them again
    would fail here), continues the cloning from the newest save, and clones the same parameters
    as an uninterrupted cloning, bitwise."""
    every_step = "sft.save_every_s=0.000001"
    status, output = arlarena_train(shared, tmp_path, "[cloning 10]", signal.SIGKILL, every_step)
    assert status == -signal.SIGKILL, output
    saved = Checkpointer(tmp_path / "checkpoints_sft", keep=1)
    step = saved.latest_step()
    saved.close()
    assert step is not None and 8 <= step <= 14, output  # step 8 is committed when 10 logs
    assert (tmp_path / "demonstrations.jsonl").is_file()
    assert not list((tmp_path / "checkpoints").glob("[0-9]*"))  # no RL step yet

    def no_playing(*args, **kwargs):
        raise AssertionError("the demonstrations were played again")

    monkeypatch.setattr("arlarena_jax.train.cloning.demonstrations", no_playing)
    config = load_config(CONFIG, [*overrides(shared, tmp_path), every_step])
    with Run(config, console=False) as run:
        run.start()  # clones on from the save, evaluates, saves step 0
        run.checkpointer.wait()
    assert_same_params(saved_params(tmp_path / "checkpoints" / "0"), uninterrupted_clone)
    assert not (tmp_path / "checkpoints_sft").exists()
    assert not (tmp_path / "demonstrations.jsonl").exists()  # gone with the cloning state


class Stop(Exception):
    pass


def test_a_cloning_job_continued_from_its_saved_state_equals_the_uninterrupted_job(tmp_path):
    """Stopped after step 3 of 7 (two epochs of 3 batches and one more: the stream position
    crosses epochs), saved and restored with orbax, continued: the same parameters."""
    examples = [
        (f"room {i}: push the box {('up', 'left')[i % 2]}", f"<a>{i}</a>") for i in range(9)
    ]
    shape = preset(
        "tiny",
        vocab_size=320,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=16,
    )
    new_params = lambda: nnx.split(QwenForCausalLM(shape, rngs=nnx.Rngs(0)))[1]  # noqa: E731
    tokenizer = train_tiny([p + r for p, r in examples], 300)
    model = QwenForCausalLM(shape, rngs=nnx.Rngs(0))
    job = prepare_sft(model, tokenizer, examples, steps=7, batch_size=3)
    assert job.num_batches == 3 and job.position(3) == (1, 0) and job.position(7) == (2, 1)
    uninterrupted, history = job.run(job.start(new_params()))
    assert len(history) == 7

    checkpointer = Checkpointer(tmp_path, keep=1)

    def stop_after_three(s: CloneState):
        if s.step == 3:
            checkpointer.save(3, {"params": s.params, "opt_state": s.opt_state}, force=True)
            checkpointer.wait()
            raise Stop

    with pytest.raises(Stop):
        job.run(job.start(new_params()), after_step=stop_after_three)
    fresh = job.start(new_params())
    target = abstract_like({"params": fresh.params, "opt_state": fresh.opt_state})
    tree, _ = checkpointer.restore(target, 3)
    checkpointer.close()
    continued, rest = job.run(CloneState(tree["params"], tree["opt_state"], 3))
    assert [row["step"] for row in rest] == [3.0, 4.0, 5.0, 6.0]
    assert [row["loss"] for row in rest] == [row["loss"] for row in history[3:]]
    for got, want in zip(
        jax.tree.leaves(continued.params), jax.tree.leaves(uninterrupted.params), strict=True
    ):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


class SignalOnEntering:
    """A stand-in for the PreemptionGuard whose SIGTERM arrives as the run enters ``phase``
    (the phases without a log line to wait for: demonstrations, export)."""

    signal = signal.SIGTERM

    def __init__(self, phase: str) -> None:
        self.phase, self.run = phase, None

    @property
    def requested(self) -> bool:
        return self.run is not None and self.run.phase == self.phase

    def watch_runs(self, monkeypatch) -> None:
        """Watch the phase of every :class:`Run` built from now on (until ``monkeypatch.undo``)."""
        original_init = Run.__init__

        def init(run, *args, **kwargs):
            original_init(run, *args, **kwargs)
            self.run = run

        monkeypatch.setattr(Run, "__init__", init)


@pytest.mark.parametrize(("phase", "at"), [("demonstrations", ""), ("export", " at step 1 of 1")])
def test_a_stop_during_demonstrations_or_export_saves_and_the_next_start_finishes(
    shared, tmp_path, monkeypatch, phase, at
):
    config = load_config(CONFIG, [*overrides(shared, tmp_path), "trainer.export_hf=true"])
    guard = SignalOnEntering(phase)
    guard.watch_runs(monkeypatch)
    summary = train(config, console=False, guard=guard)
    assert summary.stopped == f"SIGTERM during {phase}{at}"
    assert not (tmp_path / "hf").exists()  # the export had not begun
    monkeypatch.undo()
    finished = train(config, console=False)
    assert finished.stopped is None and finished.steps == 1 and (tmp_path / "hf").is_dir()


def test_a_stop_during_the_export_stops_the_run_and_a_finished_run_does_nothing(
    shared, tmp_path, monkeypatch, capsys
):
    """SIGTERM arrives while the export writes: the run stops (75's summary) once the export
    is done; the next start exports again without evaluating again, and marks the run complete;
    a third start does nothing and says so in one line (exit 0). A raised total_steps is work."""
    from arlarena_jax import cli
    from arlarena_jax.train import export as export_module
    from arlarena_jax.train.final import read_final
    from arlarena_jax.train.finish import complete_summary

    config = load_config(CONFIG, [*overrides(shared, tmp_path), "trainer.export_hf=true"])
    guard, exports, evaluations = SignalOnEntering("never"), [], []
    original_export, original_evaluate = export_module.export_hf, Run.evaluate

    def export(*args, **kwargs):
        exports.append(1)
        if len(exports) == 1:  # the first export: the signal lands while it writes
            guard.phase = "export"
        return original_export(*args, **kwargs)

    def evaluate(self, *args, **kwargs):
        evaluations.append(self.phase)
        return original_evaluate(self, *args, **kwargs)

    monkeypatch.setattr(export_module, "export_hf", export)
    monkeypatch.setattr(Run, "evaluate", evaluate)
    guard.watch_runs(monkeypatch)
    summary = train(config, console=False, guard=guard)
    assert summary.stopped == "SIGTERM during export at step 1 of 1"
    assert exports == [1] and (tmp_path / "hf").is_dir()
    record = read_final(tmp_path)
    assert record["step"] == 1 and record["complete"] is False and record["exported"] is False
    assert "val/success_rate" in record["final_eval"]
    assert complete_summary(config) is None

    evaluations.clear()
    guard.phase = "never"  # no signal now
    finished = train(config, console=False, guard=guard)
    assert finished.stopped is None and not finished.already_complete
    assert exports == [1, 1] and evaluations == []  # the final evaluation read from final.json
    assert finished.final_eval == record["final_eval"]
    assert read_final(tmp_path)["complete"] is True

    def no_run(self, *args, **kwargs):
        raise AssertionError("a complete run was built")

    monkeypatch.setattr(Run, "__init__", no_run)
    again = train(config, console=False)
    assert again.already_complete and again.steps == 1 and again.final_eval == record["final_eval"]
    argv = ["train", CONFIG, *overrides(shared, tmp_path), "trainer.export_hf=true"]
    capsys.readouterr()
    assert cli.main(argv) == 0
    out, err = capsys.readouterr()
    assert out == f"arlarena: run {tmp_path} is complete (step 1); nothing to do\n" and not err
    more = load_config(CONFIG, [*overrides(shared, tmp_path), "trainer.total_steps=2"])
    assert complete_summary(more) is None  # a raised total_steps goes on training


def test_a_step_stopped_during_its_evaluation_is_evaluated_on_the_next_start(
    shared, tmp_path, monkeypatch
):
    """SIGTERM lands as step 1's held-out evaluation begins (``trainer.eval_every=1`` of 2
    steps): step 1 is saved without its ``held_out`` file. The next start evaluates step 1
    first, then trains step 2; that evaluation's per-episode outcomes and ``val/`` scalars equal
    an uninterrupted run's (same saved parameters, the evaluation's own seed stream)."""
    from arlarena_jax.train.held_out import held_out_path, read_records
    from arlarena_jax.train.metrics import read_scalars

    extra = ["sft.steps=2", "trainer.total_steps=2", "trainer.eval_every=1"]
    config = lambda name: load_config(CONFIG, [*overrides(shared, tmp_path / name), *extra])  # noqa: E731
    guard, evaluations = SignalOnEntering("never"), []
    original_evaluate = Run.evaluate

    def evaluate(self, step=None):
        evaluations.append((self.host.step, step))
        if self.host.step == 1 and step is None:  # Run.step's evaluation: signal as it begins
            guard.phase = self.phase
        return original_evaluate(self, step)

    monkeypatch.setattr(Run, "evaluate", evaluate)
    guard.watch_runs(monkeypatch)
    stopped = tmp_path / "stopped"
    summary = train(config("stopped"), console=False, guard=guard)
    assert summary.stopped == "SIGTERM during RL at step 1 of 2"
    assert (stopped / "checkpoints" / "1").is_dir()
    assert not held_out_path(stopped, 1).exists()

    evaluations.clear()
    guard.phase = "never"
    finished = train(config("stopped"), console=False, guard=guard)
    assert finished.stopped is None and finished.steps == 2
    assert evaluations[0] == (1, 1)  # step 1's evaluation, before step 2 trained
    assert held_out_path(stopped, 1).is_file()

    monkeypatch.undo()
    whole = tmp_path / "whole"
    assert train(config("whole"), console=False).stopped is None
    assert read_records(held_out_path(stopped, 1)) == read_records(held_out_path(whole, 1))
    val = lambda run_dir: read_scalars(run_dir / "tensorboard")["test/success_rate"]  # noqa: E731
    assert [s for s, _ in val(stopped)] == [s for s, _ in val(whole)]
    assert dict(val(stopped))[1] == dict(val(whole))[1]
