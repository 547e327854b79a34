"""A local sandbox for model-written Python: kernel namespaces, a private filesystem view, no
network, an unprivileged uid and resource limits (spec environments §5; issue 20).

One call, :func:`run_python`, runs a snippet and returns an :class:`ExecResult` whose ``status``
is ``ok`` (exit 0), ``error`` (non-zero exit), ``timeout`` (the wall clock ran out) or ``killed``
(a signal, e.g. a limit, or the output cap). Nothing the snippet does outlives the call.

Isolation (``SandboxConfig.isolation``):

* ``unshare`` (the caller is root): util-linux ``unshare`` makes new PID, network, mount, IPC and
  UTS namespaces. Inside, a shell prelude (still root, in the new mount namespace only) mounts a
  private tmpfs on ``/tmp`` and ``/dev/shm``, hides ``$HOME``, ``/root``, ``/home``, the host's
  temporary folders, the project and the other configured folders under empty read-only tmpfs
  mounts, binds the Python installation back read-only, and remounts ``/`` read-only. Then
  ``setpriv`` drops to an unprivileged uid of its own per call (so RLIMIT_NPROC counts this call's
  processes only; it is not enforced for root) with no capabilities and no new privileges,
  ``prlimit`` sets the limits and ``env -i`` leaves an empty environment.
* ``userns`` (not root): the same, inside a user namespace (``unshare --user --map-root-user``);
  the snippet's uid 0 is the caller's uid outside.
* ``none``: a plain subprocess, as the original; only with ``allow_unsandboxed=True``.
* ``auto``: ``unshare`` as root, else ``userns`` where the kernel allows it; else a one-line
  error (never silently unsandboxed).

The snippet is the init process (pid 1) of its PID namespace: when it exits, or when the wall
clock kills the ``unshare`` process (``--kill-child``), the kernel kills every process left in
the namespace, double-forked daemons included. Inherited file descriptors are closed, the code
arrives on stdin, and stdout/stderr are read up to ``output_limit`` bytes each; past it the run
is killed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import os
import selectors
import shlex
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path

ISOLATIONS = ("auto", "unshare", "userns", "none")
STATUSES = ("ok", "error", "timeout", "killed")
UID_BASE = 200_000  # per-call uids: UID_BASE + (call number mod UID_SLOTS), never a real user
UID_SLOTS = 10_000
HIDDEN = ("/root", "/home", "/tmp", "/var/tmp", "/dev/shm", "/run", "/media", "/srv", "/sys")
_calls = itertools.count()
_lock = threading.Lock()


@dataclasses.dataclass(frozen=True)
class SandboxConfig:
    """Limits and isolation of one sandboxed run (see module doc)."""

    timeout_s: float = 10.0  # wall clock (the original: 3 s in its config, 10 s in its scripts)
    cpu_s: int = 10
    memory_mb: int = 2048  # address space
    file_size_mb: int = 16
    tmp_size_mb: int = 64  # the private /tmp
    open_files: int = 64
    processes: int = 32
    output_limit: int = 64 * 1024  # bytes read per stream before the run is killed
    isolation: str = "auto"
    allow_unsandboxed: bool = False  # isolation "none" (or "auto" without namespaces) runs bare
    hide: tuple[str, ...] = ()  # more folders to hide (the project and $HOME always are)
    python: str = sys.executable

    def __post_init__(self) -> None:
        if self.isolation not in ISOLATIONS:
            raise ValueError(
                f"sandbox isolation must be one of {', '.join(ISOLATIONS)}, got {self.isolation!r}"
            )
        for field in (
            "timeout_s",
            "cpu_s",
            "memory_mb",
            "file_size_mb",
            "tmp_size_mb",
            "open_files",
            "processes",
            "output_limit",
        ):
            if not getattr(self, field) > 0:
                raise ValueError(f"sandbox {field} must be > 0, got {getattr(self, field)!r}")


@dataclasses.dataclass(frozen=True)
class ExecResult:
    """The outcome of one run (``status`` in :data:`STATUSES`)."""

    status: str
    stdout: str
    stderr: str
    returncode: int | None
    seconds: float
    truncated: bool = False  # an output stream reached ``output_limit``


class SandboxUnavailable(RuntimeError):
    """No isolation is available and unsandboxed runs were not allowed (one line)."""


def userns_available() -> bool:
    """Whether an unprivileged user namespace can be made here."""
    unshare = shutil.which("unshare")
    if unshare is None:
        return False
    probe = subprocess.run(
        [unshare, "--user", "--map-root-user", "true"], capture_output=True, timeout=10
    )
    return probe.returncode == 0


def resolve_isolation(config: SandboxConfig) -> str:
    """The backend ``config`` asks for, checked (see module doc)."""
    wanted = config.isolation
    if wanted == "none":
        if not config.allow_unsandboxed:
            raise SandboxUnavailable(
                "sandbox isolation 'none' runs model code unsandboxed: "
                "set allow_unsandboxed: true to accept that"
            )
        return "none"
    tools = [shutil.which(t) for t in ("unshare", "setpriv", "prlimit", "mount")]
    if wanted in ("auto", "unshare") and os.geteuid() == 0 and all(tools):
        return "unshare"
    if wanted in ("auto", "userns") and all(tools) and userns_available():
        return "userns"
    if wanted == "auto" and config.allow_unsandboxed:
        return "none"
    raise SandboxUnavailable(
        f"sandbox isolation {wanted!r} is not available: install util-linux (unshare, setpriv, "
        "prlimit, mount) and run as root, or allow unprivileged user namespaces "
        "(sysctl kernel.unprivileged_userns_clone=1)"
    )


def _keep_paths(config: SandboxConfig) -> list[str]:
    """The Python installation the snippet needs, read-only: prefixes and import paths."""
    paths = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    paths |= {
        os.path.realpath(p) for p in sys.path if p and os.path.isdir(p) and "site-packages" in p
    }
    python = os.path.realpath(config.python)
    paths.add(os.path.dirname(os.path.dirname(python)))
    return sorted(paths)


def _hidden_paths(config: SandboxConfig) -> list[str]:
    """Folders the snippet must not see (existing ones only, outermost first)."""
    project = str(Path(__file__).resolve().parents[2])
    home = os.path.expanduser("~")
    wanted = {*HIDDEN, home, project, *config.hide}
    existing = sorted({os.path.realpath(p) for p in wanted if os.path.isdir(p)}, key=len)
    return [
        p for i, p in enumerate(existing) if not any(p.startswith(q + "/") for q in existing[:i])
    ]


def _mount_lines(config: SandboxConfig) -> list[str]:
    """Hide the host's folders under tmpfs mounts (``/tmp`` and ``/dev/shm`` private and
    writable), with the Python installation bound back read-only over them."""
    q = shlex.quote
    keep = _keep_paths(config)
    lines = ["mount --make-rprivate /", "mount -t tmpfs -o size=1m tmpfs /mnt"]
    lines += [f"mkdir -p /mnt/k{i} && mount --rbind {q(p)} /mnt/k{i}" for i, p in enumerate(keep)]
    private = f"size={config.tmp_size_mb}m,mode=1777,nosuid,nodev"
    for path in _hidden_paths(config):
        options = private if path in ("/tmp", "/dev/shm") else "size=1m,mode=755,nosuid,nodev"
        lines.append(f"mount -t tmpfs -o {options} tmpfs {q(path)}")
    for i, path in enumerate(keep):
        lines.append(f"mkdir -p {q(path)} && mount --move /mnt/k{i} {q(path)}")
    lines += ["umount /mnt", "mount -t tmpfs -o size=1m,mode=755 tmpfs /mnt"]
    lines.append("mount -o remount,bind,ro /")  # the bind flag: this mount only, not the disk
    lines += [f"mount -o remount,bind,ro {q(p)}" for p in keep]
    return lines


def prelude(config: SandboxConfig, uid: int | None) -> str:
    """The root shell script run inside the new namespaces before the snippet (see module doc):
    the mounts, then the snippet's Python with dropped privileges, limits and no environment."""
    limits = (
        f"--cpu={config.cpu_s} --as={config.memory_mb * 2**20} "
        f"--fsize={config.file_size_mb * 2**20} --nofile={config.open_files} "
        f"--nproc={config.processes} --core=0"
    )
    drop = ""
    if uid is not None:
        drop = (
            f"setpriv --reuid={uid} --regid={uid} --clear-groups --no-new-privs "
            "--inh-caps=-all --bounding-set=-all "
        )
    python = shlex.quote(config.python)
    run = f"{drop}prlimit {limits} env -i PATH=/usr/bin:/bin HOME=/tmp LANG=C.UTF-8 {python} -I -"
    return "\n".join(["set -e", *_mount_lines(config), "cd /tmp", f"exec {run}"])


def _next_uid() -> int:
    with _lock:
        return UID_BASE + next(_calls) % UID_SLOTS


def command(config: SandboxConfig, isolation: str) -> list[str]:
    """The argv that runs a snippet from stdin under ``isolation``."""
    if isolation == "none":
        return [config.python, "-I", "-"]
    namespaces = [
        "--pid",
        "--net",
        "--mount",
        "--ipc",
        "--uts",
        "--fork",
        "--kill-child",
        "--mount-proc",
    ]
    if isolation == "userns":
        return [
            "unshare",
            "--user",
            "--map-root-user",
            *namespaces,
            "sh",
            "-c",
            prelude(config, None),
        ]
    return ["unshare", *namespaces, "sh", "-c", prelude(config, _next_uid())]


def _read(
    proc: subprocess.Popen, code: bytes, config: SandboxConfig
) -> tuple[bytes, bytes, str | None, bool]:
    """Feed the code, read both streams up to the cap; (stdout, stderr, why killed, truncated)."""
    proc.stdin.write(code)
    proc.stdin.close()
    buffers = {proc.stdout: bytearray(), proc.stderr: bytearray()}
    selector = selectors.DefaultSelector()
    for stream in buffers:
        os.set_blocking(stream.fileno(), False)
        selector.register(stream, selectors.EVENT_READ)
    deadline = time.monotonic() + config.timeout_s
    reason, truncated = None, False
    while selector.get_map():
        left = deadline - time.monotonic()
        if left <= 0:
            reason = "timeout"
            break
        for key, _ in selector.select(min(left, 0.5)):
            chunk = key.fileobj.read(65536)
            if not chunk:
                selector.unregister(key.fileobj)
                continue
            buf = buffers[key.fileobj]
            buf += chunk[: max(0, config.output_limit - len(buf))]
            if len(chunk) and len(buf) >= config.output_limit:
                truncated, reason = True, "output"
        if reason:
            break
    selector.close()
    return bytes(buffers[proc.stdout]), bytes(buffers[proc.stderr]), reason, truncated


def _kill(proc: subprocess.Popen) -> None:
    """SIGKILL the run's process group (``unshare --kill-child`` then kills the namespace)."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)


def run_python(code: str, config: SandboxConfig | None = None) -> ExecResult:
    """Run ``code`` in the sandbox (see module doc); never raises for anything the code does."""
    config = config or SandboxConfig()
    isolation = resolve_isolation(config)
    start = time.monotonic()
    proc = subprocess.Popen(
        command(config, isolation),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        close_fds=True,
        start_new_session=True,
        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "LANG": "C.UTF-8"},
        cwd="/",
    )
    try:
        out, err, reason, truncated = _read(proc, code.encode("utf-8", "replace"), config)
    except BrokenPipeError:  # the sandbox died before reading the code
        out, err, reason, truncated = b"", b"", None, False
    if reason is not None:
        _kill(proc)
    returncode = proc.wait()
    _kill(proc)  # anything left in the session (the namespace is gone with its init)
    return ExecResult(
        status=_status(reason, returncode),
        stdout=out.decode("utf-8", "replace"),
        stderr=err.decode("utf-8", "replace"),
        returncode=returncode,
        seconds=time.monotonic() - start,
        truncated=truncated,
    )


def _status(reason: str | None, returncode: int) -> str:
    if reason == "timeout":
        return "timeout"
    if reason == "output" or returncode < 0 or returncode >= 128:
        return "killed"
    return "ok" if returncode == 0 else "error"


def run_many(
    codes: Sequence[str], config: SandboxConfig | None = None, workers: int | None = None
) -> list[ExecResult]:
    """Run snippets concurrently, ``workers`` at a time (default: the usable cores)."""
    from concurrent.futures import ThreadPoolExecutor

    workers = workers or len(os.sched_getaffinity(0))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return list(pool.map(lambda c: run_python(c, config), codes))
