"""Unpacking an ALFWorld tarball (envs/alfworld/data.py): only plain files and folders under
``json_2.1.1/``, re-rooted there; links and paths that leave the destination are dropped. The
same on a Python without tarfile's extraction filters (3.11.0-3.11.3, Debian 12's 3.11.2), which
is simulated by removing ``tarfile.data_filter`` and making ``extractall`` refuse ``filter=``.
No engine and no shared data needed: the tarball is made here."""

from __future__ import annotations

import io
import tarfile

import pytest

from envs.alfworld.data import unpack


def add(tar: tarfile.TarFile, name: str, data: bytes = b"", **fields) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    for key, value in fields.items():
        setattr(info, key, value)
    tar.addfile(info, io.BytesIO(data))


@pytest.fixture
def tarball(tmp_path):
    path = tmp_path / "problems.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        add(tar, "alfworld/json_2.1.1/valid_seen/task-1/trial_1/traj_data.json", b"{}", mode=0o4755)
        add(
            tar,
            "alfworld/json_2.1.1/valid_seen/task-1/trial_1/link",
            type=tarfile.SYMTYPE,
            linkname="/etc/passwd",
        )
        add(tar, "alfworld/json_2.1.1/../../evil.txt", b"x")
        add(tar, "alfworld/README.md", b"outside json_2.1.1")
    return path


def unpacked_files(root):
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if not p.is_dir())


def test_only_plain_files_under_json_are_extracted_re_rooted(tarball, tmp_path):
    root = unpack(tarball, tmp_path / "out")
    assert root == tmp_path / "out" / "json_2.1.1"
    assert unpacked_files(tmp_path / "out") == [
        ".unpacked-problems.tar.gz",
        "json_2.1.1/valid_seen/task-1/trial_1/traj_data.json",
    ]
    assert not (tmp_path / "evil.txt").exists()


def test_python_without_extraction_filters(tarball, tmp_path, monkeypatch):
    monkeypatch.delattr(tarfile, "data_filter")
    plain_extractall = tarfile.TarFile.extractall

    def old_extractall(self, path=".", members=None, *, numeric_owner=False, **kwargs):
        if kwargs:
            raise TypeError(
                f"extractall() got an unexpected keyword argument {next(iter(kwargs))!r}"
            )
        return plain_extractall(self, path, members, numeric_owner=numeric_owner)

    monkeypatch.setattr(tarfile.TarFile, "extractall", old_extractall)
    root = unpack(tarball, tmp_path / "out")
    data = root / "valid_seen" / "task-1" / "trial_1" / "traj_data.json"
    assert data.read_bytes() == b"{}"
    assert not data.stat().st_mode & 0o4000  # no set-id bit
    assert unpacked_files(root) == ["valid_seen/task-1/trial_1/traj_data.json"]
