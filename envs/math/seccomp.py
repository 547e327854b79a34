"""The sandbox's seccomp filter: no keyrings, no new namespaces, no mounts (issue 37, S4 and S6).

Kernel keyrings are not namespaced, so a key a snippet adds to its uid's user keyring outlives
the call and reaches the next snippet of that uid; a user namespace made inside the sandbox gives
the snippet every capability there (kernel attack surface). The filter, installed by the snippet's
launcher (:func:`launcher_code`) after the privileges are dropped and before the snippet's Python
starts, answers:

* ``EPERM`` to ``keyctl``, ``add_key``, ``request_key``; ``unshare`` and ``setns``; ``mount``,
  ``umount2``, ``pivot_root``, ``chroot`` and the new mount API (``open_tree``, ``move_mount``,
  ``fsopen``, ``fsconfig``, ``fsmount``, ``fspick``, ``mount_setattr``); ``bpf``,
  ``perf_event_open``, ``userfaultfd`` and ``io_uring_setup`` (attack surface a snippet has no use
  for);
* ``EPERM`` to ``clone`` with any ``CLONE_NEW*`` flag (threads and ``fork`` pass);
* ``ENOSYS`` to ``clone3``, whose flags live in memory a filter cannot read: the C library then
  falls back to ``clone`` (glibc does so for ``posix_spawn`` and threads);
* on x86-64, ``EPERM`` to every x32 system call (numbers with bit 30 set); a foreign
  architecture's entry (``int 0x80``) kills the process;
* everything else is allowed.

A filter is inherited by every child and cannot be removed. The program is classic BPF over
``struct seccomp_data`` (``nr`` at offset 0, ``arch`` at 4, ``args[0]``'s low word at 16 on these
little-endian machines); :func:`evaluate` interprets it for the tests.
"""

from __future__ import annotations

import errno
import platform
import struct

# BPF opcodes (linux/filter.h) and seccomp return values (linux/seccomp.h)
LD_W_ABS, JEQ, JGE, JSET, RET = 0x20, 0x15, 0x35, 0x45, 0x06
RET_ALLOW, RET_ERRNO, RET_KILL_PROCESS = 0x7FFF0000, 0x00050000, 0x80000000
X32_BIT = 0x40000000
CLONE_NEW_FLAGS = 0x7E020000  # NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET
DENIED = [
    "keyctl",
    "add_key",
    "request_key",
    "unshare",
    "setns",
    "mount",
    "umount2",
    "pivot_root",
    "chroot",
    "open_tree",
    "move_mount",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    "bpf",
    "perf_event_open",
    "userfaultfd",
    "io_uring_setup",
]

ARCHES = {  # machine: (AUDIT_ARCH_*, "name=number ..." of its system calls)
    "x86_64": (
        0xC000003E,
        "keyctl=250 add_key=248 request_key=249 unshare=272 setns=308 mount=165 umount2=166 "
        "pivot_root=155 chroot=161 open_tree=428 move_mount=429 fsopen=430 fsconfig=431 "
        "fsmount=432 fspick=433 mount_setattr=442 bpf=321 perf_event_open=298 userfaultfd=323 "
        "io_uring_setup=425 clone=56 clone3=435",
    ),
    "aarch64": (
        0xC00000B7,
        "keyctl=219 add_key=217 request_key=218 unshare=97 setns=268 mount=40 umount2=39 "
        "pivot_root=41 chroot=51 open_tree=428 move_mount=429 fsopen=430 fsconfig=431 "
        "fsmount=432 fspick=433 mount_setattr=442 bpf=280 perf_event_open=241 userfaultfd=282 "
        "io_uring_setup=425 clone=220 clone3=435",
    ),
}


def syscall_numbers(machine: str) -> dict[str, int]:
    """The system call numbers of ``machine`` the filter names."""
    if machine not in ARCHES:
        raise UnsupportedMachine(f"the sandbox's seccomp filter has no table for {machine!r}")
    return {k: int(v) for k, v in (pair.split("=") for pair in ARCHES[machine][1].split())}


class UnsupportedMachine(RuntimeError):
    """No system call table for this machine's architecture."""


def _insn(code: int, k: int, jt: int = 0, jf: int = 0) -> bytes:
    return struct.pack("<HBBI", code, jt, jf, k)


def program(machine: str | None = None) -> bytes:
    """The filter for ``machine`` (default: this one's), as ``struct sock_filter`` bytes."""
    machine = machine or platform.machine()
    numbers = syscall_numbers(machine)
    arch = ARCHES[machine][0]
    denied = [numbers[name] for name in DENIED]
    # layout: checks, then the four returns at the end, jumped to by distance
    body = [("ld", 4), ("jeq", arch, None, "kill"), ("ld", 0)]
    if machine == "x86_64":
        body.append(("jge", X32_BIT, "eperm", None))
    body += [("jeq", nr, "eperm", None) for nr in denied]
    body += [("jeq", numbers["clone3"], "enosys", None), ("jeq", numbers["clone"], None, "allow")]
    body += [("ld", 16), ("jset", CLONE_NEW_FLAGS, "eperm", "allow")]
    ends = {"allow": RET_ALLOW, "eperm": RET_ERRNO | errno.EPERM}
    ends |= {"enosys": RET_ERRNO | errno.ENOSYS, "kill": RET_KILL_PROCESS}
    where = {name: len(body) + i for i, name in enumerate(ends)}
    out = []
    for i, (op, k, *targets) in enumerate(body):
        if op == "ld":
            out.append(_insn(LD_W_ABS, k))
            continue
        jt, jf = (0 if t is None else where[t] - i - 1 for t in targets)
        out.append(_insn({"jeq": JEQ, "jge": JGE, "jset": JSET}[op], k, jt, jf))
    return b"".join(out) + b"".join(_insn(RET, value) for value in ends.values())


def evaluate(prog: bytes, nr: int, arch: int, arg0: int = 0) -> int:
    """What ``prog`` returns for system call ``nr`` of ``arch`` with first argument ``arg0``
    (an interpreter of the instructions :func:`program` uses)."""
    data = {0: nr & 0xFFFFFFFF, 4: arch, 16: arg0 & 0xFFFFFFFF}
    insns = [struct.unpack("<HBBI", prog[i : i + 8]) for i in range(0, len(prog), 8)]
    pc, acc = 0, 0
    while True:
        code, jt, jf, k = insns[pc]
        if code == RET:
            return k
        if code == LD_W_ABS:
            acc, pc = data[k], pc + 1
            continue
        taken = {JEQ: acc == k, JGE: acc >= k, JSET: bool(acc & k)}[code]
        pc += 1 + (jt if taken else jf)


LAUNCHER = """\
import ctypes, os, sys
libc = ctypes.CDLL(None, use_errno=True)
code = bytes.fromhex({hex!r})
buf = ctypes.create_string_buffer(code, len(code))
class Prog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]
prog = Prog(len(code) // 8, ctypes.addressof(buf))
u = ctypes.c_ulong
libc.prctl.argtypes = [ctypes.c_int, u, ctypes.c_void_p, u, u]
if libc.prctl(38, 1, None, 0, 0) or libc.prctl(22, 2, ctypes.byref(prog), 0, 0):
    os.write(2, b"sandbox: seccomp filter refused: " + os.strerror(ctypes.get_errno()).encode())
    os._exit(125)
os.execv(sys.executable, [sys.executable, "-I", "-"])
"""


def launcher_code(machine: str | None = None) -> str:
    """Python (run as ``python -I -S -c``) that sets no-new-privileges (``prctl(38)``), installs
    the filter (``prctl(PR_SET_SECCOMP=22, SECCOMP_MODE_FILTER=2)``) and execs ``python -I -``,
    which reads the snippet from the same stdin. Exit 125 with one line if the kernel refuses."""
    return LAUNCHER.format(hex=program(machine).hex())
