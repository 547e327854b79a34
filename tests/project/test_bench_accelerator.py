"""``bench/accelerator.py`` (issue 41), the one-process accelerator bench, cannot rot: its
``--cpu-dry-run`` runs every part at tiny shapes on this CPU (transformers on PyTorch's CPU as the
reference) and writes ``accelerator.json`` and ``accelerator.md``; every part reports numbers,
all finite (MFU is None: no CPU peak in the table), and its checks pass (float32 logits within
1e-4 relative error of transformers', the SAMPO loss on the default device equal to the CPU's).
A part that raises, or runs past its cap, reports the error and the parts after it still run.
The dry run is about 75 CPU-seconds, most of it XLA compiling the trainer's and the on-device
rollout's programs (1:15-1:45 wall on the 2-core machine under a load of 4-8).
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("torch")
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
import accelerator


def numbers(value) -> list[float]:
    """Every int and float in a JSON value (booleans left out)."""
    if isinstance(value, dict):
        return [n for v in value.values() for n in numbers(v)]
    if isinstance(value, list):
        return [n for v in value for n in numbers(v)]
    if isinstance(value, int | float) and not isinstance(value, bool):
        return [float(value)]
    return []


@pytest.fixture(scope="module")
def dry_run(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("accelerator")
    accelerator.main([str(out), "--cpu-dry-run"])
    return out


def test_every_part_reports_finite_numbers_and_passes(dry_run):
    out = dry_run
    written = json.loads((out / "accelerator.json").read_text())
    assert list(written["parts"]) == list(accelerator.PARTS)
    for name, part in written["parts"].items():
        assert part["status"] == "ok", (name, part.get("error"), part.get("traceback"))
        assert part["rows"], f"{name} reported no rows"
        assert name == "versions" or numbers(part["rows"]), f"{name} reported no numbers"
        assert all(math.isfinite(n) for n in numbers(part)), name
    correctness = written["parts"]["correctness"]
    assert [row["model"] for row in correctness["rows"]] == ["qwen3", "llama"]
    assert all(row["float32"] <= accelerator.F32_TOL for row in correctness["rows"])
    assert written["parts"]["training"]["sharding"], "the sharding audit lists the parameters"
    table = (out / "accelerator.md").read_text()
    for name in accelerator.PARTS:
        assert f"| {name} | ok |" in table


def test_a_failing_or_overrunning_part_does_not_stop_the_others(tmp_path, monkeypatch):
    def slow(sizes, result):
        result["rows"] = [{"kept": 1.0}]  # what a part measured before its cap stays
        time.sleep(5)

    def fine(sizes, result):
        result["rows"] = [{"value": 2.0}]

    monkeypatch.setitem(accelerator.PART_FUNCTIONS, "correctness", slow)
    for name in ("sampler", "training"):
        monkeypatch.setitem(accelerator.PART_FUNCTIONS, name, fine)
    argv = [str(tmp_path), "--cpu-dry-run", "--parts", "versions", "correctness", "sampler"]
    argv += ["training", "--inject-failure", "sampler", "--cap", "correctness=1"]
    report = accelerator.main(argv)
    parts = json.loads((tmp_path / "accelerator.json").read_text())["parts"]
    assert parts == json.loads(json.dumps(accelerator.clean(report["parts"])))
    assert parts["versions"]["status"] == "ok"
    assert parts["correctness"]["status"] == "error"
    assert "cap" in parts["correctness"]["error"] and parts["correctness"]["seconds"] < 4
    assert parts["correctness"]["rows"] == [{"kept": 1.0}]
    assert parts["sampler"]["error"] == "RuntimeError: injected failure (--inject-failure)"
    assert parts["training"] == parts["training"] | {"status": "ok", "rows": [{"value": 2.0}]}
    assert "| sampler | error |" in (tmp_path / "accelerator.md").read_text()


def test_versions_name_the_wheel_to_carry(monkeypatch):
    real = accelerator.metadata.version

    def version(name):
        return {"flax": "0.10.0", "gymnax": "0.9"}.get(name) or real(name)

    monkeypatch.setattr(accelerator.metadata, "version", version)
    rows = {row["package"]: row for row in accelerator.version_rows()}
    assert not rows["flax"]["ok"] and "flax>=0.12 wheel" in rows["flax"]["carry"]
    assert not rows["gymnax"]["ok"] and rows["gymnax"]["carry"].startswith("gymnax==1.0.1")
    assert rows["jax"]["ok"]


@pytest.mark.parametrize(
    ("kind", "chip"),
    [
        ("NVIDIA H100 80GB HBM3", "H100 SXM"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA H200", "H200 SXM"),
        ("NVIDIA A100-SXM4-80GB", "A100 SXM 80GB"),
        ("TPU v4", "TPU v4"),
        ("TPU v5 lite", "TPU v5e"),
        ("TPU v5", "TPU v5p"),
        ("TPU v6 lite", "TPU v6e"),
        ("cpu", None),
    ],
)
def test_the_peak_table_reads_device_kinds(kind, chip, monkeypatch):
    class Device:
        device_kind = kind

    monkeypatch.setattr(accelerator.jax, "devices", lambda *a: [Device()])
    assert accelerator.device_peak()["chip"] == chip
