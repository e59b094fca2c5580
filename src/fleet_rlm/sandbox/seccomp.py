"""The sandbox's seccomp filter: system calls that would let code leave or attack the sandbox fail with
``EPERM`` (a clean error, not a kill).

The filter is a classic BPF program Fleet assembles itself (no libseccomp to install: a table of the
calls' numbers per architecture, checked against libseccomp's own in the tests), handed to bubblewrap
on a pipe (``--seccomp FD``), which loads it just before it runs the worker, so every process of the
sandbox carries it. Denied: new namespaces (``unshare``, and ``clone`` with any ``CLONE_NEW*`` flag;
``clone3``, whose flags a filter cannot read, answers ``ENOSYS`` so libc falls back to ``clone``),
``setns``, every mount call, tracing and reading other processes, the kernel keyring, BPF, perf
events, io_uring, kernel modules, kexec, userfaultfd, and a few administrative calls. Sockets whose
address space the sandbox's network namespace does not scope are denied too: ``AF_VSOCK`` (the host's
and the hypervisor's vsock ports) and every netlink protocol but ``NETLINK_ROUTE`` (which glibc's
``getaddrinfo`` and ``if_nameindex`` use, and which sees only the sandbox's own namespace), so no
``NETLINK_KOBJECT_UEVENT`` socket hears the host's device events. Calls of another ABI (32-bit
``int 0x80`` or x32 on x86-64) are denied too.
"""

from __future__ import annotations

import errno
import functools
import os
import platform
import struct
from dataclasses import dataclass

# Denied outright, with EPERM. Calls an architecture lacks (its table has no number) are left out there.
DENIED_SYSCALLS = (
    "setns",
    "mount",
    "umount",
    "umount2",
    "pivot_root",
    "chroot",
    "move_mount",
    "open_tree",
    "fsopen",
    "fsconfig",
    "fsmount",
    "fspick",
    "mount_setattr",
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "process_madvise",
    "pidfd_getfd",
    "kcmp",
    "keyctl",
    "add_key",
    "request_key",
    "bpf",
    "perf_event_open",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
    "init_module",
    "finit_module",
    "delete_module",
    "kexec_load",
    "kexec_file_load",
    "userfaultfd",
    "open_by_handle_at",
    "fanotify_init",
    "swapon",
    "swapoff",
    "reboot",
    "acct",
    "quotactl",
    "syslog",
)
CLONE_NEWTIME = 0x00000080
CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
# For clone(2) the low byte is the exit signal, so CLONE_NEWTIME (0x80) is only checked in unshare.
CLONE_NAMESPACE_FLAGS = (
    CLONE_NEWNS,
    CLONE_NEWCGROUP,
    CLONE_NEWUTS,
    CLONE_NEWIPC,
    CLONE_NEWUSER,
    CLONE_NEWPID,
    CLONE_NEWNET,
)
UNSHARE_NAMESPACE_FLAGS = (*CLONE_NAMESPACE_FLAGS, CLONE_NEWTIME)
# socket(2) and socketpair(2) take (domain, type, protocol): the domain and protocol are checked.
SOCKET_CALLS = ("socket", "socketpair")
AF_NETLINK = 16
AF_VSOCK = 40
NETLINK_ROUTE = 0


@dataclass(frozen=True)
class Architecture:
    """What the filter needs of an architecture: its audit id and its calls' numbers."""

    audit_arch: int
    numbers: dict[str, int]
    """Each denied call this architecture has, and clone, unshare, clone3, socket and socketpair."""
    x32_bit: int = 0
    """A bit that marks another ABI's numbers under the same audit id (x32 on x86-64); 0: none."""


# From the kernel's tables: arch/x86/entry/syscalls/syscall_64.tbl and include/uapi/asm-generic/unistd.h.
X86_64 = Architecture(
    audit_arch=0xC000003E,
    x32_bit=0x40000000,
    numbers={
        "setns": 308, "mount": 165, "umount2": 166, "pivot_root": 155, "chroot": 161, "move_mount": 429,
        "open_tree": 428, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442,
        "ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "process_madvise": 440,
        "pidfd_getfd": 438, "kcmp": 312, "keyctl": 250, "add_key": 248, "request_key": 249, "bpf": 321,
        "perf_event_open": 298, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
        "init_module": 175, "finit_module": 313, "delete_module": 176, "kexec_load": 246,
        "kexec_file_load": 320, "userfaultfd": 323, "open_by_handle_at": 304, "fanotify_init": 300,
        "swapon": 167, "swapoff": 168, "reboot": 169, "acct": 163, "quotactl": 179, "syslog": 103,
        "clone": 56, "unshare": 272, "clone3": 435, "socket": 41, "socketpair": 53,
    },
)  # fmt: skip
AARCH64 = Architecture(
    audit_arch=0xC00000B7,
    numbers={
        "setns": 268, "mount": 40, "umount2": 39, "pivot_root": 41, "chroot": 51, "move_mount": 429,
        "open_tree": 428, "fsopen": 430, "fsconfig": 431, "fsmount": 432, "fspick": 433, "mount_setattr": 442,
        "ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271, "process_madvise": 440,
        "pidfd_getfd": 438, "kcmp": 272, "keyctl": 219, "add_key": 217, "request_key": 218, "bpf": 280,
        "perf_event_open": 241, "io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
        "init_module": 105, "finit_module": 273, "delete_module": 106, "kexec_load": 104,
        "kexec_file_load": 294, "userfaultfd": 282, "open_by_handle_at": 265, "fanotify_init": 262,
        "swapon": 224, "swapoff": 225, "reboot": 142, "acct": 89, "quotactl": 60, "syslog": 116,
        "clone": 220, "unshare": 97, "clone3": 435, "socket": 198, "socketpair": 199,
    },
)  # fmt: skip
ARCHITECTURES = {"x86_64": X86_64, "amd64": X86_64, "aarch64": AARCH64, "arm64": AARCH64}

# Classic BPF (linux/filter.h, linux/seccomp.h).
LOAD_WORD = 0x20  # BPF_LD | BPF_W | BPF_ABS
JUMP_EQUAL = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
JUMP_AT_LEAST = 0x35  # BPF_JMP | BPF_JGE | BPF_K
JUMP_ANY_BIT = 0x45  # BPF_JMP | BPF_JSET | BPF_K
RETURN = 0x06  # BPF_RET | BPF_K
RET_ALLOW = 0x7FFF0000
RET_ERRNO = 0x00050000
NR_OFFSET, ARCH_OFFSET, ARG0_LOW_OFFSET = 0, 4, 16  # struct seccomp_data; args are little-endian u64s
ARG2_LOW_OFFSET = ARG0_LOW_OFFSET + 2 * 8
# Only an argument's low 32 bits are read: the kernel reads an int argument so, whatever the high bits.
MAX_JUMP = 255


class SeccompUnavailable(RuntimeError):
    """The filter cannot be built here; the message says why."""


@dataclass(frozen=True)
class SeccompFilter:
    """The BPF program bubblewrap loads."""

    program: bytes

    def pipe(self) -> int:
        """A pipe's read end holding the program, for ``bwrap --seccomp FD`` (the caller closes it)."""
        read_end, write_end = os.pipe()
        try:
            os.write(write_end, self.program)  # a few hundred bytes: well within the pipe's buffer
        finally:
            os.close(write_end)
        return read_end


@functools.cache
def sandbox_filter() -> SeccompFilter:
    """Build (once per process) the filter every sandbox gets. Raises SeccompUnavailable."""
    machine = platform.machine().lower()
    arch = ARCHITECTURES.get(machine)
    if arch is None or struct.pack("=H", 1) != struct.pack("<H", 1):
        raise SeccompUnavailable(f"no system call table for this architecture ({machine or 'unknown'})")
    return SeccompFilter(assemble(arch))


def assemble(arch: Architecture) -> bytes:
    """The program: another architecture or ABI is denied; each denied call returns EPERM; clone and
    unshare return EPERM when their flags ask for any new namespace; clone3 returns ENOSYS; socket and
    socketpair return EPERM for AF_VSOCK and for AF_NETLINK but NETLINK_ROUTE; all else runs."""
    numbers = arch.numbers
    program: list[tuple[int, int | str, int | str, int]] = [
        (LOAD_WORD, 0, 0, ARCH_OFFSET),
        (JUMP_EQUAL, 0, "deny", arch.audit_arch),
        (LOAD_WORD, 0, 0, NR_OFFSET),
    ]
    if arch.x32_bit:
        program.append((JUMP_AT_LEAST, "deny", 0, arch.x32_bit))
    program += [(JUMP_EQUAL, "deny", 0, numbers[name]) for name in DENIED_SYSCALLS if name in numbers]
    program += [
        (JUMP_EQUAL, "clone", 0, numbers["clone"]),
        (JUMP_EQUAL, "unshare", 0, numbers["unshare"]),
        (JUMP_EQUAL, "enosys", 0, numbers["clone3"]),
        *((JUMP_EQUAL, "socket", 0, numbers[name]) for name in SOCKET_CALLS),
        (RETURN, 0, 0, RET_ALLOW),
    ]
    labels = {"clone": len(program)}
    program += [(LOAD_WORD, 0, 0, ARG0_LOW_OFFSET), (JUMP_ANY_BIT, "deny", 0, _mask(CLONE_NAMESPACE_FLAGS))]
    program.append((RETURN, 0, 0, RET_ALLOW))
    labels["unshare"] = len(program)
    program += [(LOAD_WORD, 0, 0, ARG0_LOW_OFFSET), (JUMP_ANY_BIT, "deny", 0, _mask(UNSHARE_NAMESPACE_FLAGS))]
    program.append((RETURN, 0, 0, RET_ALLOW))
    labels["socket"] = len(program)
    program += [
        (LOAD_WORD, 0, 0, ARG0_LOW_OFFSET),
        (JUMP_EQUAL, "deny", 0, AF_VSOCK),
        (JUMP_EQUAL, 0, "allow socket", AF_NETLINK),
        (LOAD_WORD, 0, 0, ARG2_LOW_OFFSET),
        (JUMP_EQUAL, 0, "deny", NETLINK_ROUTE),
    ]
    labels["allow socket"] = len(program)
    program.append((RETURN, 0, 0, RET_ALLOW))
    labels["enosys"] = len(program)
    program.append((RETURN, 0, 0, RET_ERRNO | errno.ENOSYS))
    labels["deny"] = len(program)
    program.append((RETURN, 0, 0, RET_ERRNO | errno.EPERM))

    def offset(target: int | str, at: int) -> int:
        if isinstance(target, int):
            return target
        distance = labels[target] - at - 1
        if not 0 <= distance <= MAX_JUMP:  # pragma: no cover - the program is far shorter
            raise SeccompUnavailable(f"the seccomp program's jump to {target} is out of range")
        return distance

    return b"".join(
        struct.pack("<HBBI", code, offset(true, at), offset(false, at), k)
        for at, (code, true, false, k) in enumerate(program)
    )


def _mask(flags: tuple[int, ...]) -> int:
    mask = 0
    for flag in flags:
        mask |= flag
    return mask
