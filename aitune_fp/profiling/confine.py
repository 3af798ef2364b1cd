"""What a worker's code can reach: none of its parent's files, no way out of its group.

The group is what the judge reads a candidate's CPU time from and kills at close; a process that
left it (``start_new_session=True``, a daemon's ``setsid``) escaped both and outlived the tune. A
forked worker held every file of the user's process: another worker's connection, the JSON log.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import platform
import signal
import struct
import sys
from collections.abc import Iterable
from typing import Any

#: Linux's audit architecture of each machine, and its ``setpgid``, ``setsid``, ``socket``, ``prctl``.
_ARCHES = {"x86_64": (0xC000003E, 109, 112, 41, 157), "aarch64": (0xC00000B7, 154, 157, 198, 167)}
_IO_URING_SETUP = 425  # the same on both: it could open and connect a socket past ``socket``
_LOAD, _IF_EQUAL, _IF_AT_LEAST, _RETURN = 0x20, 0x15, 0x35, 0x06  # classic BPF opcodes
_ALLOW, _ERRNO = 0x7FFF0000, 0x00050000  # seccomp's actions
_X32 = 0x40000000  # x86-64's x32 calls carry this bit: another table, refused
_AF_UNIX, _PR_SET_CHILD_SUBREAPER = 1, 36
_EPERM, _ENOSYS, _EAFNOSUPPORT = 1, 38, 97
_CAP_SYS_PTRACE = 19
_installed: list[bool] = []  # once a process: a second filter would only cost each call more

#: A step of the program: (opcode, value, label jumped to where the test holds, else the next).
_Step = tuple[int, int, str | None]


class _Program(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def group_filter(arch: int, setpgid: int, setsid: int, socket: int, prctl: int) -> bytes:
    """The seccomp program: what keeps a worker's processes in its group and its reach local.

    ``setsid`` and ``setpgid`` return 0 without effect (code that asks still runs: a child of
    AITune's monitor too); a Unix-domain socket is an address family not supported, so no local
    server (the fork server, a service manager) can be asked to start a process outside; the
    worker stays its descendants' subreaper; another architecture's calls fail.
    """
    steps: list[tuple[str, _Step]] = [
        ("", (_LOAD, 4, None)),  # seccomp_data.arch
        ("", (-_IF_EQUAL, arch, "refuse")),  # another ABI (a 32-bit call): refused
        ("", (_LOAD, 0, None)),  # seccomp_data.nr
        ("", (_IF_AT_LEAST, _X32, "refuse")),
        ("", (_IF_EQUAL, setpgid, "done")),
        ("", (_IF_EQUAL, setsid, "done")),
        ("", (_IF_EQUAL, _IO_URING_SETUP, "no such call")),
        ("", (_IF_EQUAL, socket, "socket")),
        ("", (_IF_EQUAL, prctl, "prctl")),
        ("", (_RETURN, _ALLOW, None)),
        ("socket", (_LOAD, 16, None)),  # seccomp_data.args[0] (its low word): the family
        ("", (_IF_EQUAL, _AF_UNIX, "no unix")),
        ("", (_RETURN, _ALLOW, None)),
        ("prctl", (_LOAD, 16, None)),  # the option
        ("", (_IF_EQUAL, _PR_SET_CHILD_SUBREAPER, "refuse")),
        ("", (_RETURN, _ALLOW, None)),
        ("done", (_RETURN, _ERRNO | 0, None)),  # the process stays where it is
        ("no such call", (_RETURN, _ERRNO | _ENOSYS, None)),  # as a kernel without io_uring
        ("no unix", (_RETURN, _ERRNO | _EAFNOSUPPORT, None)),
        ("refuse", (_RETURN, _ERRNO | _EPERM, None)),
    ]
    at = {label: i for i, (label, _) in enumerate(steps) if label}
    code = b""
    for i, (_, (op, value, to)) in enumerate(steps):
        jump = 0 if to is None else at[to] - i - 1  # classic BPF jumps forward only
        # a negative opcode: jump where the test fails (the arch), else where it holds
        taken, other = (0, jump) if op < 0 else (jump, 0)
        code += struct.pack("HBBI", abs(op), taken, other, value)
    return code


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint32) for n in ("effective", "permitted", "inheritable")]


def _no_tracing(libc: Any) -> None:
    """Drop ``CAP_SYS_PTRACE`` (a root worker holds it): none to trace a peer, or to regain."""
    libc.prctl(24, _CAP_SYS_PTRACE, 0, 0, 0)  # PR_CAPBSET_DROP
    libc.prctl(47, 4, 0, 0, 0)  # PR_CAP_AMBIENT_CLEAR_ALL
    header = _CapHeader(0x20080522, 0)  # _LINUX_CAPABILITY_VERSION_3, this process
    data = (_CapData * 2)()
    if libc.capget(ctypes.byref(header), data) != 0:
        return
    for field in ("effective", "permitted", "inheritable"):
        setattr(data[0], field, getattr(data[0], field) & ~(1 << _CAP_SYS_PTRACE))
    libc.capset(ctypes.byref(header), data)


def confine() -> str | None:
    """Confine this process and all it will start, for good; call before a candidate's code.

    It is not dumpable and cannot trace (a root worker loses ``CAP_SYS_PTRACE``): the kernel lets
    a peer of the same user trace a process or write its memory (``/proc/PID/mem``) only while
    it is dumpable, or with that capability;
    the seccomp filter (:func:`group_filter`) keeps its processes in its group and its reach local.
    Returns why the filter could not be installed (another system or machine, no seccomp), or None.
    """
    if _installed:
        return None
    arch = _ARCHES.get(platform.machine())
    if not sys.platform.startswith("linux") or arch is None:
        return f"no seccomp filter for {sys.platform} on {platform.machine()}"
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE: off (no core dump either)
    libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)  # an orphan below is its child, counted
    _no_tracing(libc)
    code = group_filter(*arch)
    buffer = ctypes.create_string_buffer(code, len(code))
    program = _Program(len(code) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    # PR_SET_NO_NEW_PRIVS, then PR_SET_SECCOMP with SECCOMP_MODE_FILTER
    if libc.prctl(38, 1, 0, 0, 0) != 0 or libc.prctl(22, 2, ctypes.byref(program), 0, 0) != 0:
        return f"the kernel refused a seccomp filter (errno {ctypes.get_errno()})"
    _installed.append(True)
    return None


def blank_inherited(keep: Iterable[int]) -> None:
    """Point every inherited file descriptor but ``keep`` and stdio at ``/dev/null``.

    Blank, not closed: a file object of the parent's (a log handler's) still writes somewhere,
    never into a file this process opens later under the same number. Multiprocessing's fork
    server and resource tracker of the parent are forgotten: code here starts its own, inside.
    """
    kept = {0, 1, 2, *keep}
    try:
        held = [int(fd) for fd in os.listdir("/proc/self/fd")]
    except OSError:  # not Linux: the same, where the system lists them
        held = [int(fd) for fd in os.listdir("/dev/fd")] if os.path.isdir("/dev/fd") else []
    with contextlib.suppress(ValueError, OSError):
        signal.set_wakeup_fd(-1)  # an event loop's, about to be blank
    null = os.open(os.devnull, os.O_RDWR)
    for fd in held:
        if fd not in kept and fd != null:
            with contextlib.suppress(OSError):  # the listing's own, closed by now
                os.dup2(null, fd, inheritable=False)
    os.close(null)
    import multiprocessing.forkserver as forkserver
    import multiprocessing.resource_tracker as resource_tracker

    server: Any = forkserver._forkserver
    tracker: Any = resource_tracker._resource_tracker
    server._forkserver_address = server._forkserver_alive_fd = server._forkserver_pid = None
    server._inherited_fds = None
    tracker._fd = tracker._pid = None
