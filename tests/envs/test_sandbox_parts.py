"""The parts the math sandbox is built from (issue 37): the seccomp filter, host-wide uids,
per-call control groups, the memory budget and the filesystem view. The attacks themselves, run
through the real sandbox, are in tests/envs/test_math_sandbox.py."""

from __future__ import annotations

import errno
import os
import re
import subprocess
import sys
import threading
import types
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from arlarena_base import host_memory
from arlarena_jax.errors import ConfigError
from envs.math import cgroups, memory_budget, sandbox_view, seccomp, uids

HEADERS = {  # the kernel's own numbers, where linux-libc-dev is installed
    "x86_64": Path("/usr/include/x86_64-linux-gnu/asm/unistd_64.h"),
    "aarch64": Path("/usr/include/asm-generic/unistd.h"),
}
ALLOW = seccomp.RET_ALLOW
EPERM = seccomp.RET_ERRNO | errno.EPERM


@pytest.mark.parametrize("machine", sorted(seccomp.ARCHES))
def test_syscall_numbers_match_the_kernel_headers(machine):
    header = HEADERS[machine]
    if not header.is_file():
        pytest.skip(f"{header} is absent (apt-get install linux-libc-dev)")
    defined = dict(re.findall(r"#define __NR_(\w+)\s+(\d+)", header.read_text()))
    numbers = seccomp.syscall_numbers(machine)
    assert numbers == {name: int(defined[name]) for name in numbers}


@settings(max_examples=300, deadline=None)
@given(
    machine=st.sampled_from(sorted(seccomp.ARCHES)),
    nr=st.integers(0, 600),
    flags=st.integers(0, 2**32 - 1),
)
def test_the_filter_denies_exactly_what_it_lists(machine, nr, flags):
    """Law: a listed call gets EPERM, clone3 ENOSYS, clone EPERM iff a CLONE_NEW* flag is set,
    every other call of the machine's own architecture is allowed."""
    prog, arch = seccomp.program(machine), seccomp.ARCHES[machine][0]
    numbers = seccomp.syscall_numbers(machine)
    got = seccomp.evaluate(prog, nr, arch, flags)
    if nr in {numbers[name] for name in seccomp.DENIED}:
        assert got == EPERM
    elif nr == numbers["clone3"]:
        assert got == seccomp.RET_ERRNO | errno.ENOSYS
    elif nr == numbers["clone"]:
        assert got == (EPERM if flags & seccomp.CLONE_NEW_FLAGS else ALLOW)
    else:
        assert got == ALLOW


def test_foreign_architectures_and_x32_are_refused():
    prog = seccomp.program("x86_64")
    assert seccomp.evaluate(prog, 1, 0x40000003) == seccomp.RET_KILL_PROCESS  # i386 entry
    assert seccomp.evaluate(prog, 0x40000000 | 1, 0xC000003E) == EPERM  # x32 write
    assert seccomp.evaluate(prog, 1, 0xC000003E) == ALLOW  # x86-64 write
    assert seccomp.evaluate(seccomp.program("aarch64"), 1, 0xC000003E) == seccomp.RET_KILL_PROCESS
    with pytest.raises(seccomp.UnsupportedMachine, match="no table for 'riscv64'"):
        seccomp.program("riscv64")


def test_the_launcher_filters_and_then_runs_the_snippet():
    """Outside any sandbox: the launcher installs the filter and hands stdin to Python."""
    if os.uname().machine not in seccomp.ARCHES:
        pytest.skip(f"no seccomp table for {os.uname().machine}")
    snippet = (
        "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "print(libc.unshare(0x10000000), ctypes.get_errno())\n"
        "pid = os.fork()\nos._exit(0) if pid == 0 else print(os.waitpid(pid, 0)[1])\n"
    )
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", seccomp.launcher_code()],
        input=snippet,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.stdout.split() == ["-1", str(errno.EPERM), "0"], done.stderr


# -- uids --------------------------------------------------------------------------------------


def test_live_calls_hold_distinct_uids(tmp_path):
    held, barrier = [], threading.Barrier(8)

    def call():
        with uids.held_uid(tmp_path) as uid:
            held.append(uid)
            barrier.wait(timeout=10)  # all eight hold theirs at once

    threads = [threading.Thread(target=call) for _ in range(8)]
    [t.start() for t in threads]
    [t.join() for t in threads]
    assert len(set(held)) == 8
    assert all(uids.UID_BASE <= u < uids.UID_BASE + uids.UID_SLOTS for u in held)


def test_a_dead_holders_uid_is_free_again(tmp_path, monkeypatch):
    """A process killed with SIGKILL while holding every slot leaves them free."""
    monkeypatch.setattr(uids, "UID_SLOTS", 2)
    script = (
        "import sys, time\nfrom envs.math import uids\nuids.UID_SLOTS = 2\n"
        f"a = uids.held_uid(__import__('pathlib').Path({str(tmp_path)!r}))\n"
        f"b = uids.held_uid(__import__('pathlib').Path({str(tmp_path)!r}))\n"
        "a.__enter__(); b.__enter__(); print('held', flush=True); time.sleep(60)\n"
    )
    holder = subprocess.Popen(
        [sys.executable, "-c", script],
        stdout=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).parents[2],
    )
    assert holder.stdout.readline().strip() == "held"
    busy = pytest.raises(uids.NoFreeUid, match="all 2 sandbox uids are in use")
    with busy, uids.held_uid(tmp_path):
        pass
    holder.kill()
    holder.wait()
    with uids.held_uid(tmp_path) as uid:
        assert uid in (uids.UID_BASE, uids.UID_BASE + 1)


# -- control groups (the real ones run in tests/envs/test_math_sandbox.py's S3 test) ----------


def _fake_tree(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def test_own_cgroup_paths_are_read_per_controller():
    text = "4:memory:/a/b\n3:cpu,cpuacct:/\n8:pids:/p\n0::/unified/x\n"
    paths = cgroups._own_paths(text)
    assert paths == {"memory": "/a/b", "cpu": "/", "cpuacct": "/", "pids": "/p", "": "/unified/x"}


def test_a_v1_call_group_writes_its_limits_joins_and_goes(tmp_path):
    parents = {"memory": tmp_path / "memory", "pids": tmp_path / "pids"}
    [p.mkdir() for p in parents.values()]
    group = cgroups.CallGroup("c1", memory_mb=256, processes=10, found=("v1", parents))
    assert (parents["memory"] / "c1/memory.limit_in_bytes").read_text() == str(256 * 2**20)
    assert (parents["pids"] / "c1/pids.max").read_text() == "10"
    argv = group.wrap(["unshare", "--pid", "x y"])
    assert argv[:2] == ["sh", "-c"] and argv[3:] == ["sh", "unshare", "--pid", "x y"]
    assert argv[2].count("cgroup.procs") == 2 and argv[2].endswith('exec "$@"')
    for path in group.dirs:  # a real cgroup folder's files vanish with it; here by hand
        [f.unlink() for f in path.iterdir()]
    group.close()
    assert not (parents["memory"] / "c1").exists() and not (parents["pids"] / "c1").exists()


def test_a_v2_call_group_writes_memory_swap_and_pids(tmp_path):
    group = cgroups.CallGroup("c2", memory_mb=512, processes=34, found=("v2", {"": tmp_path}))
    (tmp_path / "c2/memory.swap.max").write_text("max")  # swap is accounted on this "host"
    group._write_limits(str(512 * 2**20), "34")
    values = {f: (tmp_path / "c2" / f).read_text() for f in ("memory.max", "pids.max")}
    assert values == {"memory.max": str(512 * 2**20), "pids.max": "34"}
    assert (tmp_path / "c2/memory.swap.max").read_text() == "0"
    _fake_tree(tmp_path / "c2", {"memory.events": "low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\n"})
    assert group.out_of_memory()


def test_v2_groups_need_memory_and_pids_delegated(tmp_path):
    _fake_tree(tmp_path, {"cgroup.controllers": "cpu io", "own/cgroup.controllers": "cpu"})
    assert cgroups._v2_parent(tmp_path, "/own") is None
    _fake_tree(tmp_path, {"own/cgroup.controllers": "cpu memory pids"})
    assert cgroups._v2_parent(tmp_path, "/own") == tmp_path / "own" / cgroups.PARENT
    assert (tmp_path / "own/cgroup.subtree_control").read_text() == "+memory +pids"


# -- memory budget -----------------------------------------------------------------------------


def test_executors_fit_half_the_host_and_a_total_over_it_is_refused():
    assert memory_budget.default_executors(2048, cores=2, host_mb=24_000) == 2
    assert memory_budget.default_executors(2048, cores=64, host_mb=65_536) == 16  # 32 GiB / 2
    assert memory_budget.default_executors(2048, cores=8, host_mb=3_000) == 1
    assert memory_budget.over_budget(2048, 11, 22_528) is None  # 11 x 2048 = 22528: fits
    assert memory_budget.over_budget(2048, 12, 22_528) == (
        "executors",
        "12 calls x 2048 MiB = 24576 MiB is more than this host's 22528 MiB "
        "(lower it, or env.math.sandbox_memory_mb)",
    )
    assert memory_budget.over_budget(30_000, 1, 24_000)[0] == "sandbox_memory_mb"


def test_the_cgroup_limit_counts_where_lower(tmp_path):
    _fake_tree(tmp_path, {"memory/job/memory.limit_in_bytes": str(3 * 2**30)})
    assert host_memory.cgroup_limit_mb("4:memory:/job\n", tmp_path) == 3072
    _fake_tree(tmp_path, {"memory/free/memory.limit_in_bytes": "9223372036854771712"})
    assert host_memory.cgroup_limit_mb("4:memory:/free\n", tmp_path) is None
    _fake_tree(tmp_path, {"u/memory.max": "max"})
    assert host_memory.cgroup_limit_mb("0::/u\n", tmp_path) is None


def test_the_math_config_names_the_key_that_does_not_fit(monkeypatch):
    from envs.math import spec

    monkeypatch.setattr(memory_budget, "host_memory_mb", lambda: 8192)
    env = types.SimpleNamespace(math=spec.MathConfig(executors=5, sandbox_memory_mb=2048))
    with pytest.raises(ConfigError, match=r"^config key 'env.math.executors': 5 calls x 2048"):
        spec.executors(env)
    env = types.SimpleNamespace(math=spec.MathConfig(executors=0, sandbox_memory_mb=2048))
    assert spec.executors(env) == min(2, spec.usable_cores())


# -- the filesystem view -----------------------------------------------------------------------


def test_both_renderings_mount_the_same_view():
    entries = sandbox_view.view(sys.executable, ("/usr/share",), tmp_mb=64)
    bwrap = sandbox_view.bwrap_args(entries)
    shell = "\n".join(sandbox_view.shell_lines(entries))
    root = sandbox_view.stage(entries)
    binds = [e[1] for e in entries if e[0] == "bind"]
    for source in binds:
        assert bwrap[bwrap.index(source) - 1] == "--ro-bind"
        assert f"mount --bind {source} {root}{source}" in shell
    assert "/usr/share" in [e[1] for e in entries if e[0] == "tmpfs"]
    assert "pivot_root . .host" in shell and shell.endswith("mount -o remount,bind,ro /")
    assert not any(b == root or b.startswith(root + "/") for b in binds)
    assert not any(e[1] in ("/var", "/run", "/sys", "/home") for e in entries if e[0] == "bind")
