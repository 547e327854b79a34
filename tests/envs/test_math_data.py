"""envs/math/data.py: the math problems (the shared data folder) and one-line data errors."""

import gzip
import json
import os

import pytest

from envs.math import data
from envs.math.data import (
    EVAL_FILES,
    TRAIN_FILES,
    DataError,
    Problem,
    default_data_dir,
    load_problems,
    load_split,
)


@pytest.fixture(scope="module")
def data_dir():
    folder = default_data_dir()
    if not folder.is_dir():
        pytest.skip(f"{folder} (../shared/data/math) not found: set ${data.DATA_ENV_VAR}")
    return folder


def _check(problems, dataset, empty_answers=0):
    assert all(p.dataset == dataset for p in problems)
    assert all(p.id and p.question.strip() for p in problems)
    assert sum(not p.answer.strip() for p in problems) == empty_answers
    assert len({p.id for p in problems}) == len(problems)


def test_train_split(data_dir):
    problems = load_split(data_dir, TRAIN_FILES)
    assert len(problems) == 8523
    # Two multiple-choice problems lost their answers upstream; kept, as in the original's 8,523.
    _check(problems, "math_l3to5_train", empty_answers=2)
    assert all(p.level in (3, 4, 5) and p.subject for p in problems)


def test_eval_split(data_dir):
    problems = load_split(None, EVAL_FILES)
    assert len(problems) == 60
    _check(problems[:30], "aime2024")
    _check(problems[30:], "aime2025")
    assert problems[0].answer == "204"
    assert all(p.answer.isdigit() for p in problems)  # AIME answers are integers 0..999


def test_cached(data_dir):
    path = data_dir / "aime2024.jsonl.gz"
    assert load_problems(path) is load_problems(str(path))


def _write(path, lines):
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "wt", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    return path


GOOD = json.dumps({"id": "a-0", "question": "1+1?", "answer": "2", "level": "Level 1"})


def test_plain_and_gzip(tmp_path):
    _write(tmp_path / "a.jsonl", [GOOD])
    _write(tmp_path / "b.jsonl.gz", [GOOD.replace("a-0", "b-0")])
    problems = load_split(tmp_path, ["a", "b"])
    assert problems == (
        Problem("a-0", "1+1?", "2", "", "Level 1", "a"),
        Problem("b-0", "1+1?", "2", "", "Level 1", "b"),
    )


@pytest.mark.parametrize(
    ("bad", "reason"),
    [
        ("{not json", "line 2"),
        (json.dumps({"id": "x", "answer": "1"}), "missing 'question'"),
        (json.dumps({"id": "x", "question": " ", "answer": "1"}), "'question' is empty"),
        (json.dumps({"id": 7, "question": "q", "answer": "1"}), "'id' must be a string"),
        (json.dumps({"id": "x", "question": "q", "answer": 1}), "'answer' must be a string"),
        (json.dumps(["x"]), "JSON object"),
        (GOOD, "repeats line 1"),
        (json.dumps({"id": "", "question": "q", "answer": "1"}), "'id' is empty"),
    ],
)
def test_bad_line_is_one_line_error(tmp_path, bad, reason):
    path = _write(tmp_path / "bad.jsonl.gz", [GOOD, bad])
    with pytest.raises(DataError) as info:
        load_problems(path)
    message = str(info.value)
    assert "bad.jsonl.gz" in message and "line 2" in message and reason in message
    assert "\n" not in message


def test_missing_folder(tmp_path):
    missing = tmp_path / "nowhere"
    with pytest.raises(DataError) as info:
        load_split(missing, TRAIN_FILES)
    message = str(info.value)
    assert str(missing) in message and "env.data_path" in message
    assert "ARLARENA_MATH_DATA" in message and "\n" not in message


def test_missing_file(tmp_path):
    with pytest.raises(DataError) as info:
        load_split(tmp_path, ["aime2024"])
    assert "aime2024.jsonl.gz" in str(info.value) and "env.data_path" in str(info.value)


def test_env_var_sets_the_default(tmp_path, monkeypatch):
    monkeypatch.setenv(data.DATA_ENV_VAR, str(tmp_path))
    assert default_data_dir() == tmp_path
    monkeypatch.delenv(data.DATA_ENV_VAR)
    assert default_data_dir().parts[-3:] == ("shared", "data", "math")


def test_reload_after_change(tmp_path):
    path = _write(tmp_path / "c.jsonl", [GOOD])
    assert len(load_problems(path)) == 1
    _write(path, [GOOD, GOOD.replace("a-0", "a-1")])
    os.utime(path, ns=(1, 10**18))
    assert len(load_problems(path)) == 2
