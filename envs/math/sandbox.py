"""A local sandbox for model-written Python: kernel namespaces, a private filesystem view, no
network, an unprivileged uid and resource limits (spec environments §5; issue 20).

One call, :func:`run_python`, runs a snippet and returns an :class:`ExecResult` whose ``status``
is ``ok`` (exit 0), ``error`` (non-zero exit), ``timeout`` (the wall clock ran out) or ``killed``
(a signal, e.g. a limit, or the output cap). Nothing the snippet does outlives the call.

Isolation (``SandboxConfig.isolation``):

* ``bwrap`` (bubblewrap 0.7 or later is installed and works: ``apt-get install bubblewrap``):
  new PID, network, IPC, UTS, cgroup and mount namespaces, and a user namespace when the caller
  is not root (as root none: bubblewrap would map the snippet's uid to root outside). The
  snippet sees a new root holding only ``/usr`` (and the ``/bin``, ``/lib`` links or folders),
  ``/etc/ld.so.cache``, ``/etc/localtime``, ``/etc/alternatives`` and the Python installation,
  all read-only (folders to hide inside them under empty tmpfs mounts), a new ``/proc``, a
  minimal ``/dev``, and private size-limited tmpfs ``/tmp`` and ``/dev/shm``; the root itself is
  read-only. As root, bubblewrap keeps only CAP_SETUID, CAP_SETGID and CAP_SETPCAP, for
  ``setpriv`` to drop to the call's own uid as below; then ``prlimit`` and ``env -i`` as below.
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
* ``auto``: ``bwrap`` where it works, else ``unshare`` as root, else ``userns`` where the kernel
  allows it; else a one-line error (never silently unsandboxed).

Under ``unshare`` and ``userns`` the snippet is the init process (pid 1) of its PID namespace;
under ``bwrap`` bubblewrap's own init is, and exits as soon as the snippet does. When that init
exits, or when the wall clock kills ``unshare`` (``--kill-child``) or ``bwrap``
(``--die-with-parent``), the kernel kills every process left in the namespace, double-forked
daemons included. Inherited file descriptors are closed, the code arrives on stdin, and
stdout/stderr are read up to ``output_limit`` bytes each; past it the run is killed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
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

ISOLATIONS = ("auto", "bwrap", "unshare", "userns", "none")
STATUSES = ("ok", "error", "timeout", "killed")
UID_BASE = 200_000  # per-call uids: UID_BASE + (call number mod UID_SLOTS), never a real user
UID_SLOTS = 10_000
HIDDEN = ("/root", "/home", "/tmp", "/var/tmp", "/dev/shm", "/run", "/media", "/srv", "/sys")
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")  # bwrap: read-only
ETC = ("/etc/ld.so.cache", "/etc/localtime", "/etc/alternatives")  # bwrap: of /etc, only these
SETUID_CAPS = ("CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP")  # what setpriv needs (bwrap, as root)
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


def _bwrap_namespaces() -> list[str]:
    """As root no user namespace: bubblewrap would map the snippet's uid to root outside, where
    RLIMIT_NPROC is not enforced; ``setpriv`` drops to the call's own uid instead."""
    if os.geteuid() == 0:
        return [f"--unshare-{ns}" for ns in ("pid", "net", "ipc", "uts", "cgroup-try")]
    return ["--unshare-all"]


@functools.cache
def bwrap_available() -> bool:
    """Whether bubblewrap is on PATH and makes this backend's namespaces and tmpfs (probed once;
    a bubblewrap older than 0.7, without ``--size``, does not count)."""
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return False
    probe = [bwrap, *_bwrap_namespaces(), "--die-with-parent", "--new-session"]
    probe += ["--ro-bind", "/", "/", "--perms", "1777", "--size", "1048576", "--tmpfs", "/tmp"]
    try:
        done = subprocess.run(
            [*probe, "--cap-drop", "ALL", "true"], capture_output=True, timeout=10
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0


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
    root = os.geteuid() == 0
    inside = (
        [shutil.which(t) for t in ("setpriv", "prlimit")] if root else [shutil.which("prlimit")]
    )
    if wanted in ("auto", "bwrap") and all(inside) and bwrap_available():
        return "bwrap"
    if wanted == "bwrap":
        raise SandboxUnavailable(
            "sandbox isolation 'bwrap' is not available: install bubblewrap 0.7 or later "
            "(apt-get install bubblewrap) and util-linux (setpriv, prlimit), or use isolation auto"
        )
    tools = [shutil.which(t) for t in ("unshare", "setpriv", "prlimit", "mount")]
    if wanted in ("auto", "unshare") and root and all(tools):
        return "unshare"
    if wanted in ("auto", "userns") and all(tools) and userns_available():
        return "userns"
    if wanted == "auto" and config.allow_unsandboxed:
        return "none"
    raise SandboxUnavailable(
        f"sandbox isolation {wanted!r} is not available: install bubblewrap (apt-get install "
        "bubblewrap), or util-linux (unshare, setpriv, prlimit, mount) and run as root, or allow "
        "unprivileged user namespaces (sysctl kernel.unprivileged_userns_clone=1)"
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


def _outermost(paths) -> list[str]:
    """``paths`` without those inside another one (``/`` aside), outermost first."""
    ordered = sorted(set(paths), key=len)
    return [p for i, p in enumerate(ordered) if not any(p.startswith(q + "/") for q in ordered[:i])]


def _hidden_paths(config: SandboxConfig) -> list[str]:
    """Folders the snippet must not see (existing ones only, outermost first)."""
    project = str(Path(__file__).resolve().parents[2])
    home = os.path.expanduser("~")
    wanted = {*HIDDEN, home, project, *config.hide}
    return _outermost(os.path.realpath(p) for p in wanted if os.path.isdir(p))


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


def _run_argv(config: SandboxConfig, uid: int | None) -> list[str]:
    """The snippet's Python with dropped privileges (to ``uid``, unless None), the limits and an
    empty environment, reading the code from stdin."""
    limits = [
        f"--cpu={config.cpu_s}",
        f"--as={config.memory_mb * 2**20}",
        f"--fsize={config.file_size_mb * 2**20}",
        f"--nofile={config.open_files}",
        f"--nproc={config.processes}",
        "--core=0",
    ]
    drop = []
    if uid is not None:
        drop = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--no-new-privs"]
        drop += ["--inh-caps=-all", "--bounding-set=-all"]
    env = ["env", "-i", "PATH=/usr/bin:/bin", "HOME=/tmp", "LANG=C.UTF-8"]
    return [*drop, "prlimit", *limits, *env, config.python, "-I", "-"]


def prelude(config: SandboxConfig, uid: int | None) -> str:
    """The root shell script run inside the new namespaces before the snippet (see module doc):
    the mounts, then the snippet's Python with dropped privileges, limits and no environment."""
    run = shlex.join(_run_argv(config, uid))
    return "\n".join(["set -e", *_mount_lines(config), "cd /tmp", f"exec {run}"])


def _bwrap_mounts(config: SandboxConfig) -> list[str]:
    """bubblewrap's filesystem view (see module doc): the system and the Python installation
    read-only, a new /proc and /dev, private /tmp and /dev/shm, then the root made read-only."""
    args = []
    for path in SYSTEM:  # as on the host: merged-/usr links, or folders
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    args += ["--perms", "0755", "--dir", "/etc"]
    for path in ETC:
        args += ["--ro-bind-try", path, path]
    tmpfs = ["--perms", "1777", "--size", str(config.tmp_size_mb * 2**20), "--tmpfs"]
    args += ["--proc", "/proc", "--dev", "/dev", *tmpfs, "/tmp", *tmpfs, "/dev/shm"]
    return [*args, *_bwrap_binds(config), "--remount-ro", "/"]


def _bwrap_binds(config: SandboxConfig) -> list[str]:
    """The Python installation read-only; the folders to hide (the project, $HOME, ``hide``) that
    fall inside a bound one under empty tmpfs mounts, with the installation inside them bound
    back."""
    system = [p for p in SYSTEM if os.path.isdir(p) and not os.path.islink(p)]
    keep = [p for p in _keep_paths(config) if p != "/"]
    outer = [p for p in _outermost([*system, *keep]) if p not in system]
    inside = [*system, *keep]
    hidden = [h for h in _hidden_paths(config) if any(h.startswith(b + "/") for b in inside)]
    again = _outermost(k for k in keep if any(k == h or k.startswith(h + "/") for h in hidden))
    args = _bwrap_read_only(outer)
    for path in hidden:
        args += ["--perms", "0755", "--size", str(2**20), "--tmpfs", path]
    return args + _bwrap_read_only(again)


def _bwrap_read_only(paths: list[str]) -> list[str]:
    """Bind ``paths`` read-only, making missing parents 0755 (bubblewrap would make them 0700,
    out of the snippet's reach; existing ones keep their mode)."""
    args = []
    for path in sorted({str(q) for p in paths for q in Path(p).parents if str(q) != "/"}):
        args += ["--perms", "0755", "--dir", path]
    for path in paths:
        args += ["--ro-bind", path, path]
    return args


def _bwrap_command(config: SandboxConfig, uid: int | None) -> list[str]:
    """bubblewrap around :func:`_run_argv` (``uid``: the call's own uid, the caller is root)."""
    caps = ["--cap-drop", "ALL"]
    if uid is not None:
        caps += [arg for cap in SETUID_CAPS for arg in ("--cap-add", cap)]
    return [
        shutil.which("bwrap") or "bwrap",
        *_bwrap_namespaces(),
        "--die-with-parent",
        "--new-session",
        "--clearenv",
        "--setenv",
        "PATH",
        "/usr/bin:/bin",
        *_bwrap_mounts(config),
        "--chdir",
        "/tmp",
        *caps,
        "--",
        *_run_argv(config, uid),
    ]


def _next_uid() -> int:
    with _lock:
        return UID_BASE + next(_calls) % UID_SLOTS


def command(config: SandboxConfig, isolation: str) -> list[str]:
    """The argv that runs a snippet from stdin under ``isolation``."""
    if isolation == "none":
        return [config.python, "-I", "-"]
    if isolation == "bwrap":
        return _bwrap_command(config, _next_uid() if os.geteuid() == 0 else None)
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
    """SIGKILL the run's process group (``unshare --kill-child`` or ``bwrap
    --die-with-parent`` then kills the namespace)."""
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
