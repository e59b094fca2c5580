"""Fleet's own seccomp program against libseccomp's: the same numbers for every denied call on each
architecture Fleet knows, and the same verdict for every call number, the namespace flags and the socket
domains and netlink protocols, run through a classic-BPF interpreter. (The filter's effect in a real sandbox is tested in test_limits.py.)"""

from __future__ import annotations

import errno
import os
import struct
from collections.abc import Iterator
from typing import Any

import pytest

from fleet_rlm.sandbox import seccomp
from fleet_rlm.sandbox.seccomp import (
    AARCH64,
    AF_NETLINK,
    AF_VSOCK,
    CLONE_NAMESPACE_FLAGS,
    DENIED_SYSCALLS,
    NETLINK_ROUTE,
    SOCKET_CALLS,
    UNSHARE_NAMESPACE_FLAGS,
    X86_64,
    Architecture,
    assemble,
)

try:
    import pyseccomp as _pyseccomp
except (ImportError, OSError, RuntimeError) as missing:  # pyseccomp raises when libseccomp is missing
    pytest.skip(f"libseccomp (apt-get install libseccomp2) is the reference: {missing}", allow_module_level=True)
pyseccomp: Any = _pyseccomp

EPERM = 0x00050000 | errno.EPERM
ENOSYS = 0x00050000 | errno.ENOSYS
ALLOW = 0x7FFF0000
CLONE_VM, CLONE_FS, CLONE_FILES, SIGCHLD = 0x100, 0x200, 0x400, 17
HARMLESS_CLONE = CLONE_VM | CLONE_FS | CLONE_FILES | SIGCHLD
AF_UNIX, AF_INET, AF_INET6, SOCK_STREAM, SOCK_DGRAM = 1, 2, 10, 1, 2
NETLINK_SOCK_DIAG, NETLINK_KOBJECT_UEVENT, NETLINK_GENERIC = 4, 15, 16
HIGH_BITS = 1 << 32  # the kernel reads an int argument's low 32 bits only


def run_bpf(program: bytes, nr: int, arch: int, *args: int) -> int:
    """Run a classic BPF seccomp program on one call: what the kernel would return."""
    data = struct.pack("<iIQ6Q", nr, arch, 0, *args, *[0] * (6 - len(args)))
    code = [struct.unpack_from("<HBBI", program, at) for at in range(0, len(program), 8)]
    a = x = 0
    memory = [0] * 16
    pc = 0
    while True:
        op, jt, jf, k = code[pc]
        pc += 1
        if op == 0x20:  # ld [k]
            a = struct.unpack_from("<I", data, k)[0]
        elif op == 0x00:  # ld #k
            a = k
        elif op == 0x01:  # ldx #k
            x = k
        elif op == 0x60:  # ld M[k]
            a = memory[k]
        elif op == 0x61:  # ldx M[k]
            x = memory[k]
        elif op == 0x02:  # st M[k]
            memory[k] = a
        elif op == 0x03:  # stx M[k]
            memory[k] = x
        elif op == 0x54:  # and #k
            a &= k
        elif op == 0x05:  # ja k
            pc += k
        elif op in (0x15, 0x25, 0x35, 0x45, 0x1D, 0x2D, 0x3D, 0x4D):
            operand = x if op & 0x08 else k
            kind = op & 0xF0
            taken = {
                0x10: a == operand,
                0x20: a > operand,
                0x30: a >= operand,
                0x40: bool(a & operand),
            }[kind]
            pc += jt if taken else jf
        elif op == 0x06:  # ret #k
            return k
        elif op == 0x16:  # ret a
            return a
        else:  # pragma: no cover - an instruction this interpreter does not know
            raise AssertionError(f"unknown BPF instruction {op:#x}")


def reference(arch_name: str) -> bytes:
    """The filter as libseccomp builds it (the rules Fleet used to give libseccomp), for one architecture."""
    deny = pyseccomp.ERRNO(errno.EPERM)
    rules = pyseccomp.SyscallFilter(pyseccomp.ALLOW)
    rules.remove_arch(pyseccomp.Arch.NATIVE)
    rules.add_arch(getattr(pyseccomp.Arch, arch_name))
    rules.set_attr(pyseccomp.Attr.ACT_BADARCH, deny)
    for name in DENIED_SYSCALLS:
        if pyseccomp.resolve_syscall(getattr(pyseccomp.Arch, arch_name), name) >= 0:
            rules.add_rule(deny, name)
    for flag in CLONE_NAMESPACE_FLAGS:
        rules.add_rule(deny, "clone", pyseccomp.Arg(0, pyseccomp.MASKED_EQ, flag, flag))
    for flag in UNSHARE_NAMESPACE_FLAGS:
        rules.add_rule(deny, "unshare", pyseccomp.Arg(0, pyseccomp.MASKED_EQ, flag, flag))
    rules.add_rule(pyseccomp.ERRNO(errno.ENOSYS), "clone3")
    low_word = 0xFFFFFFFF
    for call in SOCKET_CALLS:
        rules.add_rule(deny, call, pyseccomp.Arg(0, pyseccomp.MASKED_EQ, low_word, AF_VSOCK))
        netlink = pyseccomp.Arg(0, pyseccomp.MASKED_EQ, low_word, AF_NETLINK)
        rules.add_rule(deny, call, netlink, pyseccomp.Arg(2, pyseccomp.NE, NETLINK_ROUTE))
    memory = os.memfd_create("reference-seccomp")
    try:
        with os.fdopen(os.dup(memory), "wb") as handle:
            rules.export_bpf(handle)
        return os.pread(memory, os.lseek(memory, 0, os.SEEK_END), 0)
    finally:
        os.close(memory)


ARCHES = [pytest.param(X86_64, "X86_64", id="x86_64"), pytest.param(AARCH64, "AARCH64", id="aarch64")]


@pytest.mark.parametrize(("arch", "name"), ARCHES)
def test_every_number_is_libseccomps(arch: Architecture, name: str) -> None:
    libseccomp_arch = getattr(pyseccomp.Arch, name)
    assert arch.audit_arch == int(libseccomp_arch)
    for call in (*DENIED_SYSCALLS, "clone", "unshare", "clone3", *SOCKET_CALLS):
        number = pyseccomp.resolve_syscall(libseccomp_arch, call)
        if number < 0:  # a call this architecture lacks (libseccomp's pseudo number)
            assert call not in arch.numbers, call
        else:
            assert arch.numbers[call] == number, call


def calls(arch: Architecture) -> Iterator[tuple[int, int, tuple[int, ...]]]:
    """(number, audit arch, arguments) cases: every number up to past the newest call, the namespace
    flags alone and among harmless ones, every socket domain with every netlink protocol (and a domain
    with high bits set), another ABI and another architecture."""
    for nr in range(0, 600):
        yield nr, arch.audit_arch, (0,)
    for call in ("clone", "unshare"):
        nr = arch.numbers[call]
        yield nr, arch.audit_arch, (HARMLESS_CLONE,)
        for flag in UNSHARE_NAMESPACE_FLAGS:
            yield nr, arch.audit_arch, (flag,)
            yield nr, arch.audit_arch, (flag | HARMLESS_CLONE,)
    for call in SOCKET_CALLS:
        nr = arch.numbers[call]
        for domain in range(0, 48):
            for protocol in range(0, 24):
                yield nr, arch.audit_arch, (domain, SOCK_DGRAM, protocol)
        yield nr, arch.audit_arch, (HIGH_BITS | AF_VSOCK, SOCK_STREAM, 0)
        yield nr, arch.audit_arch, (HIGH_BITS | AF_NETLINK, SOCK_DGRAM, NETLINK_KOBJECT_UEVENT)
    if arch.x32_bit:
        for nr in (0, 1, arch.numbers["clone"], 512):
            yield arch.x32_bit | nr, arch.audit_arch, (0,)
    yield 0, 0x40000003, (0,)  # i386
    yield arch.numbers["ptrace"], 0xC00000B7 if arch is X86_64 else 0xC000003E, (0,)


@pytest.mark.parametrize(("arch", "name"), ARCHES)
def test_the_program_decides_every_call_as_libseccomps(arch: Architecture, name: str) -> None:
    ours, theirs = assemble(arch), reference(name)
    disagreements = [
        (
            nr,
            hex(audit),
            [hex(arg) for arg in args],
            hex(run_bpf(ours, nr, audit, *args)),
            hex(run_bpf(theirs, nr, audit, *args)),
        )
        for nr, audit, args in calls(arch)
        if run_bpf(ours, nr, audit, *args) != run_bpf(theirs, nr, audit, *args)
    ]
    assert disagreements == []


@pytest.mark.parametrize(("arch", "name"), ARCHES)
def test_the_verdicts_themselves(arch: Architecture, name: str) -> None:
    """Not only the same as libseccomp's: the verdicts a sandbox relies on."""
    program = assemble(arch)
    for call in DENIED_SYSCALLS:
        if call in arch.numbers:
            assert run_bpf(program, arch.numbers[call], arch.audit_arch) == EPERM, call
    assert run_bpf(program, arch.numbers["clone3"], arch.audit_arch) == ENOSYS
    clone, unshare = arch.numbers["clone"], arch.numbers["unshare"]
    assert run_bpf(program, clone, arch.audit_arch, HARMLESS_CLONE) == ALLOW
    assert run_bpf(program, clone, arch.audit_arch, 0x10000000 | HARMLESS_CLONE) == EPERM
    assert run_bpf(program, unshare, arch.audit_arch, 0x80) == EPERM  # CLONE_NEWTIME
    assert run_bpf(program, unshare, arch.audit_arch, CLONE_FS) == ALLOW
    assert run_bpf(program, 0, arch.audit_arch) == ALLOW  # read (x86-64) / io_setup (aarch64)
    for call in SOCKET_CALLS:
        nr = arch.numbers[call]
        assert run_bpf(program, nr, arch.audit_arch, AF_VSOCK, SOCK_STREAM, 0) == EPERM, call
        assert run_bpf(program, nr, arch.audit_arch, HIGH_BITS | AF_VSOCK, SOCK_STREAM, 0) == EPERM, call
        for protocol in (NETLINK_SOCK_DIAG, NETLINK_KOBJECT_UEVENT, NETLINK_GENERIC):
            assert run_bpf(program, nr, arch.audit_arch, AF_NETLINK, SOCK_DGRAM, protocol) == EPERM, call
        assert run_bpf(program, nr, arch.audit_arch, AF_NETLINK, SOCK_DGRAM, NETLINK_ROUTE) == ALLOW, call
        # glibc's getaddrinfo asks the kernel about its interfaces on NETLINK_ROUTE; the protocol's
        # high bits are not the kernel's either.
        assert run_bpf(program, nr, arch.audit_arch, AF_NETLINK, SOCK_DGRAM, HIGH_BITS) == ALLOW, call
        for domain in (AF_UNIX, AF_INET, AF_INET6):
            assert run_bpf(program, nr, arch.audit_arch, domain, SOCK_STREAM, 0) == ALLOW, call
    assert run_bpf(program, 0, 0x40000003) == EPERM  # another architecture


def test_this_machine_gets_its_architectures_program() -> None:
    seccomp.sandbox_filter.cache_clear()
    try:
        program = seccomp.sandbox_filter().program
    finally:
        seccomp.sandbox_filter.cache_clear()
    assert program in (assemble(X86_64), assemble(AARCH64))
