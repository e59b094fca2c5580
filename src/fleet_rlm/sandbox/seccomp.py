"""The sandbox's seccomp filter: system calls that would let code leave or attack the sandbox fail with
``EPERM`` (a clean error, not a kill).

Built once with libseccomp (through ``pyseccomp``), exported as BPF and handed to bubblewrap on a
pipe (``--seccomp FD``), which loads it just before it runs the worker, so every process of the
sandbox carries it. Denied: new namespaces (``unshare``, and ``clone`` with any ``CLONE_NEW*`` flag;
``clone3``, whose flags a filter cannot read, answers ``ENOSYS`` so libc falls back to ``clone``),
``setns``, every mount call, tracing and reading other processes, the kernel keyring, BPF, perf
events, io_uring, kernel modules, kexec, userfaultfd, and a few administrative calls. Calls of
another ABI (e.g. 32-bit ``int 0x80`` on x86-64) are denied too.
"""

from __future__ import annotations

import errno
import functools
import os
from dataclasses import dataclass
from typing import Any

# Denied outright, with EPERM.
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
NR_UNKNOWN = -1  # libseccomp's __NR_SCMP_ERROR


class SeccompUnavailable(RuntimeError):
    """The filter cannot be built here; the message says why."""


@dataclass(frozen=True)
class SeccompFilter:
    """The exported BPF program and the denied calls this libseccomp did not know (not filtered)."""

    program: bytes
    unknown: tuple[str, ...]

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
    try:
        import pyseccomp
    except (ImportError, OSError, RuntimeError) as exc:  # pyseccomp raises when libseccomp is missing
        raise SeccompUnavailable(f"libseccomp is not available: {exc} (apt-get install libseccomp2)") from exc
    deny = pyseccomp.ERRNO(errno.EPERM)
    unknown: list[str] = []
    try:
        rules: Any = pyseccomp.SyscallFilter(pyseccomp.ALLOW)
        rules.set_attr(pyseccomp.Attr.ACT_BADARCH, deny)
        for name in DENIED_SYSCALLS:
            if not _add(pyseccomp, rules, deny, name):
                unknown.append(name)
        for flag in CLONE_NAMESPACE_FLAGS:
            _add(pyseccomp, rules, deny, "clone", pyseccomp.Arg(0, pyseccomp.MASKED_EQ, flag, flag))
        for flag in UNSHARE_NAMESPACE_FLAGS:
            _add(pyseccomp, rules, deny, "unshare", pyseccomp.Arg(0, pyseccomp.MASKED_EQ, flag, flag))
        if not _add(pyseccomp, rules, pyseccomp.ERRNO(errno.ENOSYS), "clone3"):
            unknown.append("clone3")
        program = _export(rules)
    except OSError as exc:
        raise SeccompUnavailable(f"libseccomp could not build the filter: {exc}") from exc
    return SeccompFilter(program, tuple(unknown))


def _add(pyseccomp: Any, rules: Any, action: int, name: str, *conditions: Any) -> bool:
    """Add one rule; False when this libseccomp does not know the call (a pseudo number, for a call
    this architecture lacks, is known: libseccomp then leaves it out)."""
    if pyseccomp.resolve_syscall(pyseccomp.Arch.NATIVE, name) == NR_UNKNOWN:
        return False
    rules.add_rule(action, name, *conditions)
    return True


def _export(rules: Any) -> bytes:
    memory = os.memfd_create("fleet-seccomp", os.MFD_CLOEXEC)
    try:
        with os.fdopen(os.dup(memory), "wb") as handle:
            rules.export_bpf(handle)
        size = os.lseek(memory, 0, os.SEEK_END)
        return os.pread(memory, size, 0)
    finally:
        os.close(memory)
