"""A local sandbox for model-written Python: kernel namespaces, a minimal private root, no
network, a uid of its own, a seccomp filter and limits per call (spec environments §5; issues 20
and 37).

One call, :func:`run_python`, runs a snippet and returns an :class:`ExecResult` whose ``status``
is ``ok`` (exit 0), ``error`` (non-zero exit), ``timeout`` (the wall clock ran out) or ``killed``
(a signal, e.g. a limit, or the output cap). Nothing the snippet does outlives the call.

The promise, the same under every isolating backend:

* **What the snippet sees** (``envs.math.sandbox_view``): a fresh read-only root with ``/usr``
  (and the ``/bin``, ``/lib`` links or folders), three files of ``/etc``, the Python
  installation, a new ``/proc``, a minimal ``/dev`` and private size-limited ``/tmp`` and
  ``/dev/shm``; nothing else of the host, hence no host file or unix socket outside that list.
* **Who it is**: as root, a uid of its own (``envs.math.uids``: held host-wide, never shared by
  two live calls, so ``RLIMIT_NPROC`` counts this call's processes only) with no capabilities
  and no new privileges; otherwise the caller's uid inside a user namespace.
* **What it may ask the kernel** (``envs.math.seccomp``): no keyrings, no namespaces, no mounts.
* **How much**: memory and processes per call in a control group of its own
  (``envs.math.cgroups``) where one can be made, else ``RLIMIT_AS`` of ``memory_mb /
  FALLBACK_PROCESSES`` for at most ``FALLBACK_PROCESSES`` processes; CPU seconds, file size, open
  files, no core dumps, a wall clock, an output cap; an empty environment.

Isolation (``SandboxConfig.isolation``):

* ``bwrap`` (bubblewrap 0.7 or later is installed and works: ``apt-get install bubblewrap``):
  new PID, network, IPC, UTS, cgroup and mount namespaces, and a user namespace when the caller
  is not root (as root none: bubblewrap would map the snippet's uid to root outside). bubblewrap
  builds the view; as root it keeps only CAP_SETUID, CAP_SETGID and CAP_SETPCAP, for ``setpriv``
  to drop to the call's uid.
* ``unshare`` (the caller is root): util-linux ``unshare`` makes new PID, network, mount, IPC
  and UTS namespaces. Inside, a shell prelude (root, in the new mount namespace only) builds the
  view in a tmpfs and ``pivot_root``s into it, detaching the host's root, as bubblewrap does.
* ``userns`` (not root): the same, inside a user namespace (``unshare --user
  --map-root-user``); the snippet's uid 0 is the caller's uid outside.
* ``none``: a plain subprocess, as the original; only with ``allow_unsandboxed=True``.
* ``auto``: ``bwrap`` where it works, else ``unshare`` as root, else ``userns`` where the kernel
  allows it; else a one-line error (never silently unsandboxed).

Then, under each: ``setpriv`` (as root), ``prlimit``, ``env -i`` and the seccomp launcher, which
execs ``python -I -``. Under ``unshare`` and ``userns`` the snippet is the init process (pid 1)
of its PID namespace; under ``bwrap`` bubblewrap's own init is, and exits as soon as the snippet
does. When that init exits, or when the wall clock kills ``unshare`` (``--kill-child``) or
``bwrap`` (``--die-with-parent``), the kernel kills every process left in the namespace,
double-forked daemons included. Inherited file descriptors are closed, the code arrives on
stdin, and stdout/stderr are read up to ``output_limit`` bytes each; past it the run is killed.
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
import time
from collections.abc import Iterator, Sequence

from envs.math import cgroups, sandbox_view
from envs.math.seccomp import launcher_code
from envs.math.uids import held_uid

ISOLATIONS = ("auto", "bwrap", "unshare", "userns", "none")
STATUSES = ("ok", "error", "timeout", "killed")
SETUID_CAPS = ("CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP")  # what setpriv needs (bwrap, as root)
SANDBOX_TASKS = 2  # in a call's control group beside the snippet's: bwrap and its init, or unshare
FALLBACK_PROCESSES = 4  # without a control group: processes sharing the call's memory
ONE_THREAD = tuple(f"{k}_NUM_THREADS=1" for k in ("OMP", "OPENBLAS", "MKL"))  # count as processes
_calls = itertools.count()


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
    cgroup: bool = True  # a control group per call where one can be made (else rlimits)
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
    out_of_memory: bool = False  # the call's control group hit its memory limit (OOM kill)


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


def _limits(config: SandboxConfig, group: bool) -> list[str]:
    """``prlimit`` options: with a control group (``group``) each process may use the call's
    memory and the group bounds their sum; without one, at most ``FALLBACK_PROCESSES`` processes
    share it, ``memory_mb / processes`` each, so the call's total stays within ``memory_mb``."""
    processes = config.processes if group else min(config.processes, FALLBACK_PROCESSES)
    memory = config.memory_mb if group else config.memory_mb // processes
    return [
        f"--cpu={config.cpu_s}",
        f"--as={memory * 2**20}",
        f"--fsize={config.file_size_mb * 2**20}",
        f"--nofile={config.open_files}",
        f"--nproc={processes}",
        "--core=0",
    ]


def _run_argv(config: SandboxConfig, uid: int | None, group: bool) -> list[str]:
    """The snippet's Python with dropped privileges (to ``uid``, unless None), the limits, an
    empty environment and the seccomp filter (``envs.math.seccomp``), reading the code from
    stdin."""
    drop = []
    if uid is not None:
        drop = ["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups", "--no-new-privs"]
        drop += ["--inh-caps=-all", "--bounding-set=-all"]
    env = ["env", "-i", "PATH=/usr/bin:/bin", "HOME=/tmp", "LANG=C.UTF-8", *ONE_THREAD]
    launch = [config.python, "-I", "-S", "-c", launcher_code()]
    return [*drop, "prlimit", *_limits(config, group), *env, *launch]


def _view(config: SandboxConfig) -> list[tuple]:
    return sandbox_view.view(config.python, config.hide, config.tmp_size_mb)


def prelude(config: SandboxConfig, uid: int | None, group: bool = False) -> str:
    """The root shell script run inside the new namespaces before the snippet: build the view
    (``envs.math.sandbox_view``) and ``pivot_root`` into it, then run the snippet's Python with
    dropped privileges, limits, no environment and the seccomp filter."""
    run = shlex.join(_run_argv(config, uid, group))
    lines = sandbox_view.shell_lines(_view(config))
    return "\n".join(["set -e", *lines, "cd /tmp", f"exec {run}"])


def _bwrap_command(config: SandboxConfig, uid: int | None, group: bool) -> list[str]:
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
        *sandbox_view.bwrap_args(_view(config)),
        "--chdir",
        "/tmp",
        *caps,
        "--",
        *_run_argv(config, uid, group),
    ]


def command(
    config: SandboxConfig, isolation: str, uid: int | None = None, group: bool = False
) -> list[str]:
    """The argv that runs a snippet from stdin under ``isolation``; ``uid``: the call's own uid
    (as root), ``group``: whether the call has a control group (``envs.math.cgroups``)."""
    if isolation == "none":
        return [config.python, "-I", "-"]
    if isolation == "bwrap":
        return _bwrap_command(config, uid, group)
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
        script = prelude(config, None, group)
        return ["unshare", "--user", "--map-root-user", *namespaces, "sh", "-c", script]
    return ["unshare", *namespaces, "sh", "-c", prelude(config, uid, group)]


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


@contextlib.contextmanager
def _call_resources(config: SandboxConfig, isolation: str) -> Iterator[tuple]:
    """The call's own uid (as root: held host-wide, ``envs.math.uids``) and control group
    (``envs.math.cgroups``, where one can be made), released after the call."""
    if isolation == "none":
        yield None, None
        return
    with contextlib.ExitStack() as stack:
        uid = stack.enter_context(held_uid()) if os.geteuid() == 0 else None
        group = None
        if config.cgroup and cgroups.detect() is not None:
            name = f"{os.getpid()}-{next(_calls)}-{uid if uid is not None else 'u'}"
            with contextlib.suppress(OSError):  # e.g. a full hierarchy: rlimits instead
                tasks = config.processes + SANDBOX_TASKS  # the sandbox's own processes too
                group = cgroups.CallGroup(name, config.memory_mb, tasks)
                stack.callback(group.close)
        yield uid, group


def run_python(code: str, config: SandboxConfig | None = None) -> ExecResult:
    """Run ``code`` in the sandbox (see module doc); never raises for anything the code does."""
    config = config or SandboxConfig()
    isolation = resolve_isolation(config)
    start = time.monotonic()
    with _call_resources(config, isolation) as (uid, group):
        argv = command(config, isolation, uid, group is not None)
        proc = subprocess.Popen(
            group.wrap(argv) if group is not None else argv,
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
        out_of_memory = group is not None and group.out_of_memory()
    return ExecResult(
        status=_status(reason, returncode),
        stdout=out.decode("utf-8", "replace"),
        stderr=err.decode("utf-8", "replace"),
        returncode=returncode,
        seconds=time.monotonic() - start,
        truncated=truncated,
        out_of_memory=out_of_memory,
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
