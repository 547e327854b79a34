"""The attack suite of the math sandbox (envs/math/sandbox.py; issue 20): each attack runs through
the real sandbox, under each backend the machine has (bubblewrap, and util-linux ``unshare`` as
root or a user namespace otherwise), and must be contained; the caller must get a result quickly,
and nothing may remain afterwards. A backend the machine lacks skips, saying why."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import threading
import time

import pytest

from envs.math import sandbox
from envs.math.sandbox import (
    ExecResult,
    SandboxConfig,
    SandboxUnavailable,
    bwrap_available,
    resolve_isolation,
    run_many,
    run_python,
)

CONFIG = SandboxConfig(timeout_s=3.0, cpu_s=5, memory_mb=1024, processes=16)
PROJECT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BACKENDS = ("bwrap", "unshare" if os.geteuid() == 0 else "userns")


@pytest.fixture(params=BACKENDS)
def isolation(request) -> str:
    """Each backend in turn; skips, saying why, where the machine lacks it."""
    try:
        return resolve_isolation(SandboxConfig(isolation=request.param))
    except SandboxUnavailable as exc:  # the machine: bubblewrap, util-linux, root or userns
        pytest.skip(str(exc))


@pytest.fixture
def run(isolation):
    def run(code: str, **changes) -> ExecResult:
        config = SandboxConfig(**{**CONFIG.__dict__, "isolation": isolation, **changes})
        result = run_python(code, config)
        assert result.seconds < config.timeout_s + 3.0  # the caller gets a result quickly
        return result

    return run


def sandbox_processes() -> list[str]:
    """Processes of sandbox uids (>= 200000) still alive on the host (zombies, dead and waiting
    for the host's init to reap them, aside)."""
    ps = ["ps", "-eo", "uid=,stat=,pid=,args="]
    out = subprocess.run(ps, capture_output=True, text=True).stdout.splitlines()
    rows = [line.split() for line in out]
    return [" ".join(r) for r in rows if len(r) > 1 and int(r[0]) >= 200_000 and r[1][0] != "Z"]


@pytest.fixture(autouse=True)
def nothing_remains(one_sandbox_at_a_time):
    # every test here holds the host-wide sandbox lock (tests/conftest.py), released after this
    # check, so no other worker's sandbox can be running while it looks
    yield
    # A killed snippet's processes exit at once, but the kernel tears down their namespaces (a
    # tmpfs of a million files, say) in the exiting process: seconds more on a loaded machine
    # (under pytest-xdist, 5 s once did not suffice).
    deadline = time.monotonic() + 30
    while sandbox_processes() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert sandbox_processes() == []


def test_a_plain_snippet_runs(run):
    result = run("import sympy\nprint(sympy.factor('x**2 - 1'))")
    assert (result.status, result.stdout, result.returncode) == ("ok", "(x - 1)*(x + 1)\n", 0)


@pytest.mark.parametrize(
    ("code", "secret"),
    [
        ("print(open('/etc/shadow').read())", "root:"),
        (f"import os; print(os.listdir({os.path.expanduser('~')!r}))", ".bashrc"),
        (f"import os; print(os.listdir({PROJECT!r}))", "pyproject.toml"),
        ("print(open('/proc/1/environ').read())", "ARLARENA"),
        # this test process's own command line; {pid} is filled in when the test runs, so that
        # the test's id is the same in every process (pytest-xdist's workers compare them)
        ("print(open('/proc/{pid}/cmdline').read())", "pytest"),
    ],
)
def test_host_files_are_out_of_reach(code, secret, monkeypatch, run):
    monkeypatch.setenv("ARLARENA_SECRET", "ARLARENA-leaked")
    result = run(code.replace("{pid}", str(os.getpid())))
    assert secret not in result.stdout and "ARLARENA-leaked" not in result.stdout


def test_no_environment_variables_or_inherited_descriptors(monkeypatch, run):
    monkeypatch.setenv("ARLARENA_SECRET", "leaked")
    read, write = os.pipe()  # an open descriptor of the caller
    try:
        result = run("import os; print(sorted(os.environ)); print(os.listdir('/proc/self/fd'))")
    finally:
        os.close(read), os.close(write)
    env, fds = result.stdout.splitlines()
    assert "ARLARENA_SECRET" not in env and "leaked" not in result.stdout
    assert eval(fds) == ["0", "1", "2", "3"]  # stdin/out/err and listdir's own descriptor


def test_no_network_local_or_outside(run):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    listener.settimeout(0.5)
    port = listener.getsockname()[1]
    connected = threading.Event()

    def accept():
        try:
            listener.accept()
            connected.set()
        except OSError:
            pass

    thread = threading.Thread(target=accept)
    thread.start()
    local = run(f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2)")
    outside = run("import socket; socket.create_connection(('1.1.1.1', 80), timeout=2)")
    dns = run("import socket; print(socket.gethostbyname('pypi.org'))")
    curl = run("import os; print(os.system('curl -s -m 2 http://1.1.1.1 > /dev/null'))")
    thread.join()
    listener.close()
    assert not connected.is_set()
    assert local.status == outside.status == dns.status == "error"
    assert "Network is unreachable" in local.stderr + outside.stderr
    assert curl.stdout.strip() != "0"


@pytest.mark.parametrize(
    ("code", "statuses"),
    [
        ("import os\nwhile True:\n    os.fork()", {"error", "killed", "timeout"}),  # fork bomb
        ("x = bytearray(10**11)", {"error", "killed"}),  # memory bomb
        ("while True:\n    pass", {"timeout", "killed"}),
        ("import time\ntime.sleep(1e9)", {"timeout"}),
        ("def f(n):\n    return f(n + 1)\nf(0)", {"error"}),  # deep recursion
        ("import ctypes\nctypes.string_at(0)", {"killed"}),  # segfault
    ],
)
def test_bombs_and_hangs_are_stopped(code, statuses, run):
    assert run(code).status in statuses


@pytest.mark.parametrize(("main", "status"), [("time.sleep(10)", "timeout"), ("print(1)", "ok")])
def test_a_double_forked_daemon_never_writes(main, status, tmp_path, run):
    """The daemon dies with the snippet, whether the wall clock stops it or it exits at once."""
    target = tmp_path / "late"
    code = (
        "import os, time\n"
        "if os.fork() == 0:\n"
        "    os.setsid()\n"
        "    if os.fork() == 0:\n"
        "        time.sleep(2)\n"
        f"        open({str(target)!r}, 'w').write('x')\n"
        "        open('/tmp/late', 'w').write('x')\n"
        "    os._exit(0)\n"
        f"{main}\n"
    )
    start = time.monotonic()
    assert run(code, timeout_s=1.0).status == status
    while sandbox_processes() and time.monotonic() < start + 1.5:
        time.sleep(0.1)
    assert sandbox_processes() == []  # gone before the daemon would write
    time.sleep(max(0.0, start + 2.5 - time.monotonic()))
    assert not target.exists()


def test_configured_folders_are_hidden(run):
    hidden = run("import os; print(os.listdir('/usr/share'))", hide=("/usr/share",))
    assert hidden.stdout == "[]\n"


@pytest.mark.parametrize(
    "code",
    [
        "open('/usr/evil', 'w')",
        f"open({os.path.join(PROJECT, 'evil')!r}, 'w')",
        "f = open('/tmp/big', 'wb')\nwhile True:\n    f.write(b'0' * 2**20)",  # fill the disk
        "import os\nfor i in range(10**6):\n    open(f'/tmp/f{i}', 'w').close()",  # many files
    ],
)
def test_writes_stay_inside_the_private_tmp(code, run):
    assert run(code, timeout_s=5.0).status in ("error", "timeout", "killed")
    assert not os.path.exists("/usr/evil") and not os.path.exists(os.path.join(PROJECT, "evil"))


def test_killing_the_parent_or_everything_hurts_no_one_else(isolation):
    codes = [
        "import os; os.kill(os.getppid(), 9); print('alive')",
        "import os\ntry:\n    os.kill(-1, 9)\nexcept OSError:\n    pass\nprint('alive')",
        "import time; time.sleep(1); print('neighbour survived')",
        "import time; time.sleep(1); print('neighbour survived')",
    ]
    config = SandboxConfig(**{**CONFIG.__dict__, "isolation": isolation})
    results = run_many(codes, config, workers=4)
    assert [r.stdout.strip() for r in results[2:]] == ["neighbour survived"] * 2


def test_endless_and_binary_output(run):
    endless = run("while True:\n    print('x' * 1000)", output_limit=10_000)
    assert endless.status == "killed" and endless.truncated and len(endless.stdout) <= 10_000
    binary = run("import sys; sys.stdout.buffer.write(bytes(range(256)) * 4)")
    assert binary.status == "ok" and "\ufffd" in binary.stdout  # invalid UTF-8 replaced


def test_unsandboxed_runs_need_an_explicit_yes():
    with pytest.raises(SandboxUnavailable, match="allow_unsandboxed: true"):
        resolve_isolation(SandboxConfig(isolation="none"))
    bare = run_python("print(7)", SandboxConfig(isolation="none", allow_unsandboxed=True))
    assert bare.stdout == "7\n"


def test_bad_settings_are_one_line_errors():
    with pytest.raises(ValueError, match="sandbox isolation must be one of"):
        SandboxConfig(isolation="docker")
    with pytest.raises(ValueError, match="sandbox timeout_s must be > 0"):
        SandboxConfig(timeout_s=0)


def test_auto_prefers_bwrap_then_unshare_as_root(monkeypatch):
    if bwrap_available():
        assert resolve_isolation(SandboxConfig()) == "bwrap"
    monkeypatch.setattr(sandbox, "bwrap_available", lambda: True)
    if shutil.which("prlimit") and (os.geteuid() != 0 or shutil.which("setpriv")):
        assert resolve_isolation(SandboxConfig()) == "bwrap"
    monkeypatch.setattr(sandbox, "bwrap_available", lambda: False)
    if os.geteuid() == 0 and all(shutil.which(t) for t in ("unshare", "setpriv", "prlimit")):
        assert resolve_isolation(SandboxConfig()) == "unshare"


def test_bwrap_without_bubblewrap_is_a_one_line_error(monkeypatch):
    which = shutil.which
    monkeypatch.setattr(shutil, "which", lambda name: None if name == "bwrap" else which(name))
    bwrap_available.cache_clear()
    try:
        assert not bwrap_available()
        with pytest.raises(SandboxUnavailable, match="apt-get install bubblewrap") as error:
            resolve_isolation(SandboxConfig(isolation="bwrap"))
        assert "\n" not in str(error.value)
        assert resolve_isolation(SandboxConfig(isolation="auto", allow_unsandboxed=True)) != "bwrap"
    finally:
        bwrap_available.cache_clear()  # probed again, for real, by the next test


# -- issue 37: the host behind every backend (S1-S6), each against a host-side canary ----------


@pytest.fixture
def host_folder():
    """A folder outside every hidden one (as a daemon's socket or a service's data would be),
    removed afterwards; skips where no such folder is writable."""
    import tempfile

    for parent in ("/var/lib", "/var/cache", "/opt", "/srv"):
        if os.path.isdir(parent) and os.access(parent, os.W_OK):
            folder = tempfile.mkdtemp(prefix="arlarena-canary-", dir=parent)
            os.chmod(folder, 0o755)
            yield folder
            shutil.rmtree(folder, ignore_errors=True)
            return
    pytest.skip("no writable folder outside the hidden ones (/var/lib, /var/cache, /opt, /srv)")


def test_host_unix_sockets_are_unreachable(host_folder, run):
    """S1: a listener on a path socket (mode 0777) outside /run and /tmp gets no connection."""
    path = os.path.join(host_folder, "c.sock")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path)
    os.chmod(path, 0o777)
    listener.listen()
    listener.settimeout(0.2)
    code = (
        "import socket\ns = socket.socket(socket.AF_UNIX)\n"
        f"s.connect({path!r})\ns.sendall(b'hello')\nprint(s.recv(10))"
    )
    try:
        result = run(code)
        with pytest.raises(TimeoutError):
            listener.accept()
    finally:
        listener.close()
    assert result.status == "error" and "FileNotFoundError" in result.stderr


def test_host_files_outside_the_view_are_unreadable(host_folder, run):
    """S2: a world-readable file outside the hidden folders does not exist for the snippet, and
    the root holds only the view's folders (envs/math/sandbox_view.py)."""
    canary = os.path.join(host_folder, "secret.txt")
    with open(canary, "w") as f:
        f.write("ARLARENA-CANARY")
    os.chmod(canary, 0o644)
    result = run(f"import os\nprint(sorted(os.listdir('/')))\nprint(open({canary!r}).read())")
    assert "ARLARENA-CANARY" not in result.stdout and "FileNotFoundError" in result.stderr
    from envs.math.sandbox_view import keep_paths

    tops = {p.split("/")[1] for p in keep_paths(sys.executable)}
    allowed = {"bin", "sbin", "lib", "lib32", "lib64", "libx32", "usr", "etc", "proc", "dev"}
    assert set(eval(result.stdout.splitlines()[0])) <= allowed | {"tmp"} | tops
    etc = run("import os; print(sorted(os.listdir('/etc')))")
    assert set(eval(etc.stdout)) <= {"ld.so.cache", "localtime", "alternatives"}


@pytest.mark.parametrize("cgroup", [True, False], ids=["cgroup", "rlimits"])
def test_memory_is_bounded_per_call_not_per_process(cgroup, run):
    """S3: four children of 100 MiB each never all hold their memory under a 256 MiB call
    (under RLIMIT_AS per process, 256 MiB each, all four did): with a control group where one
    can be made (else this case runs as the other), and with rlimits of 256 / 4 MiB each."""
    code = (
        "import os, time\n"
        "kids = []\n"
        "for i in range(4):\n"
        "    pid = os.fork()\n"
        "    if pid == 0:\n"
        "        try:\n"
        "            block = bytearray(b'x' * (100 * 2**20))\n"
        "        except MemoryError:\n"
        "            os._exit(3)\n"
        "        time.sleep(1.5)\n"
        "        os._exit(0)\n"
        "    kids.append(pid)\n"
        "print([os.waitpid(pid, 0)[1] for pid in kids])\n"
    )
    result = run(code, memory_mb=256, processes=8, timeout_s=8.0, cgroup=cgroup)
    # bounded: a child fails its allocation (exit 3) or is OOM-killed; or the parent is the one
    # the OOM killer picks (the call is killed); or, with 4 processes at most, the 4th fork fails
    some_failed = result.status == "ok" and eval(result.stdout).count(0) < 4
    assert result.status == "killed" or some_failed or "BlockingIOError" in result.stderr, result


def _keyctl(code: str) -> str:
    return (
        "import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\n"
        "libc.syscall.restype = ctypes.c_long\n"
        "nr = {'x86_64': (248, 249, 250), 'aarch64': (217, 218, 219)}[os.uname().machine]\n"
        "ADD_KEY, REQUEST_KEY, KEYCTL = nr\n" + code
    )


def test_keyrings_are_out_of_reach(run):
    """S4: adding a key to the user keyring fails (a covert channel between calls of one uid),
    and the host's own key (the canary) cannot be requested."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    machine_numbers = {"x86_64": 248, "aarch64": 217}
    canary = libc.syscall(
        machine_numbers[os.uname().machine], b"user", b"arlarena-canary", b"ARLARENA", 8, -3
    )  # KEY_SPEC_SESSION_KEYRING = -3
    write = _keyctl(
        "r = libc.syscall(ADD_KEY, b'user', b'x', b'secret', 6, -4)\n"  # KEY_SPEC_USER_KEYRING
        "print(r, ctypes.get_errno())\n"
        "r = libc.syscall(REQUEST_KEY, b'user', b'arlarena-canary', None, 0)\n"
        "print(r, ctypes.get_errno())\n"
        "r = libc.syscall(KEYCTL, 0, -4, 0)\n"  # KEYCTL_GET_KEYRING_ID of the user keyring
        "print(r, ctypes.get_errno())\n"
    )
    try:
        lines = run(write).stdout.split("\n")[:3]
    finally:
        if canary > 0:
            libc.syscall({"x86_64": 250, "aarch64": 219}[os.uname().machine], 21, canary)
    import errno

    assert lines == [f"-1 {errno.EPERM}"] * 3


def test_no_namespaces_inside_the_sandbox(run):
    """S6: unshare (a user namespace gives every capability in it), setns, clone with a
    CLONE_NEW* flag and the unshare tool all fail; threads and processes still work."""
    code = (
        "import ctypes, os, subprocess, threading\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "print(libc.unshare(0x10000000), libc.unshare(0x40000000))\n"  # NEWUSER, NEWNET
        "print(os.system('unshare -U -r true 2>/dev/null') != 0)\n"
        "t = threading.Thread(target=print, args=('thread',)); t.start(); t.join()\n"
        "done = subprocess.run(['echo', 'spawned'], capture_output=True, text=True)\n"
        "print(done.stdout, end='')\n"
    )
    result = run(code)
    assert result.stdout.splitlines() == ["-1 -1", "True", "thread", "spawned"], result


def _fresh_process_call(isolation: str, hold_s: float) -> subprocess.Popen:
    """A new Python process (its own counters, as a sweep worker) whose one sandbox call forks
    15 children that live ``hold_s`` seconds, then prints the call's status and uid."""
    code = (
        "import os, time\nfor i in range(15):\n    if os.fork() == 0:\n"
        f"        time.sleep({hold_s}); os._exit(0)\ntime.sleep({hold_s}); print(os.getuid())"
    )
    script = (
        "from envs.math.sandbox import SandboxConfig, run_python\n"
        f"config = SandboxConfig(isolation={isolation!r}, timeout_s=8, processes=16)\n"
        f"result = run_python({code!r}, config)\n"
        "print(result.status, result.stdout.strip() or result.stderr.strip()[-200:])\n"
    )
    return subprocess.Popen(
        [sys.executable, "-c", script], cwd=PROJECT, stdout=subprocess.PIPE, text=True
    )


def test_two_processes_never_share_a_uid(isolation):
    """S5: two fresh processes' concurrent calls (each the first of its process) run as two
    uids, so one call's 15 children do not make the other's fork() fail (RLIMIT_NPROC counts
    a uid's processes). As root only: otherwise the snippet's uid is the caller's."""
    if os.geteuid() != 0:
        pytest.skip("per-call uids are made as root only (otherwise the snippet's uid is ours)")
    first = _fresh_process_call(isolation, hold_s=4.0)
    time.sleep(2.0)  # the first call holds its uid and 15 children
    second = _fresh_process_call(isolation, hold_s=0.5)
    results = [p.communicate(timeout=60)[0].split() for p in (first, second)]
    assert [r[0] for r in results] == ["ok", "ok"], results
    assert results[0][1] != results[1][1]
