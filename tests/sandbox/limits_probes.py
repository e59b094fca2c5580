"""Code the limit tests run inside sandboxes (shared by tests/sandbox and tests/security)."""

from __future__ import annotations

# Each call runs in a forked child, which exits with the call's errno (0 when it succeeded), so a call
# that works (unshare, ptrace) cannot change the process the next call runs in. The arguments are
# chosen so that, without the filter, most calls fail differently or succeed: mount gets a bad source
# pointer (EFAULT), perf_event_open and io_uring_setup a NULL pointer (EFAULT), setns a bad fd (EBADF).
SYSCALL_PROBE = r"""
import ctypes, json, os, platform
libc = ctypes.CDLL(None, use_errno=True)
NR = {
    "x86_64": {"clone": 56, "keyctl": 250, "bpf": 321, "perf_event_open": 298, "io_uring_setup": 425,
               "kexec_load": 246, "init_module": 175, "setns": 308},
    "aarch64": {"clone": 220, "keyctl": 219, "bpf": 280, "perf_event_open": 241, "io_uring_setup": 425,
                "kexec_load": 104, "init_module": 105, "setns": 268},
}[platform.machine()]
CALLS = {
    "unshare(CLONE_NEWUSER)": lambda: libc.unshare(0x10000000),
    "clone(CLONE_NEWUSER)": lambda: libc.syscall(NR["clone"], 0x10000000 | 17, 0, 0, 0, 0),
    "setns": lambda: libc.syscall(NR["setns"], -1, 0),
    "mount": lambda: libc.mount(ctypes.c_void_p(1), b"/tmp", b"tmpfs", 0, None),
    "ptrace": lambda: libc.ptrace(0, 0, None, None),
    "keyctl": lambda: libc.syscall(NR["keyctl"], 0, -3, 0),
    "bpf": lambda: libc.syscall(NR["bpf"], 0, None, 0),
    "perf_event_open": lambda: libc.syscall(NR["perf_event_open"], None, 0, -1, -1, 0),
    "io_uring_setup": lambda: libc.syscall(NR["io_uring_setup"], 1, None),
    "kexec_load": lambda: libc.syscall(NR["kexec_load"], 0, 0, None, 0),
    "init_module": lambda: libc.syscall(NR["init_module"], None, 0, b""),
}
found = {}
for name, call in CALLS.items():
    pid = os.fork()
    if pid == 0:
        os._exit(0 if call() != -1 else ctypes.get_errno())
    found[name] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
print(json.dumps(found))
"""

# Sockets outside the sandbox's network namespace: a vsock port in the host's vsock space, and a uevent
# netlink socket bound to the kernel's device-event group (each call's errno, 0 when it worked). What
# the sandbox keeps: NETLINK_ROUTE (of its own namespace) and what libc asks of it, and AF_UNIX pairs.
SOCKET_PROBE = r"""
import errno, json, socket
VSOCK_PORT = 47047
def attempt(call):
    try:
        call()
    except OSError as exc:
        return exc.errno
    return 0
def vsock_listen():
    server = socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)
    server.bind((socket.VMADDR_CID_ANY, VSOCK_PORT))
    server.listen()
def uevents():
    listener = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, 15)  # NETLINK_KOBJECT_UEVENT
    listener.bind((0, 1))
def route():
    with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, socket.NETLINK_ROUTE) as routes:
        routes.bind((0, 0))
found = {
    "vsock listen": attempt(vsock_listen),
    "vsock to the hypervisor": attempt(lambda: socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM).connect((2, 22))),
    "uevent netlink": attempt(uevents),
    "generic netlink": attempt(lambda: socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 16)),
    "route netlink": attempt(route),
    "unix socketpair": attempt(lambda: socket.socketpair()),
    "interfaces": attempt(socket.if_nameindex),  # glibc asks NETLINK_ROUTE, as getaddrinfo does
}
"""

# Four processes each touching 400 MB; prints their exit codes (-9: killed by the kernel).
FOUR_BIG_PROCESSES = (
    "import subprocess, sys\n"
    "child = \"import time; b = b'x' * (400 * 1024 * 1024); time.sleep(1.5); print('held', len(b))\"\n"
    "procs = [subprocess.Popen([sys.executable, '-c', child]) for _ in range(4)]\n"
    "codes = [p.wait() for p in procs]\n"
    "print('exit codes', codes)"
)

# 1 GB written to /tmp a megabyte at a time (no single allocation hits the per-process limit).
FILL_TMP_WITH_1GB = (
    "chunk = b'x' * (1024 * 1024)\n"
    "with open('/tmp/big.bin', 'wb') as f:\n"
    "    for _ in range(1024):\n"
    "        f.write(chunk)\n"
    "print('wrote 1 GB to /tmp')"
)

# Four processes spinning on the CPU, waited for.
FOUR_SPINNERS = (
    "import subprocess, sys\n"
    "procs = [subprocess.Popen([sys.executable, '-c', 'while True: pass']) for _ in range(4)]\n"
    "print([p.wait() for p in procs])"
)

# A fork bomb in a separate process (so RLIMIT_NPROC and the pids cgroup, not the worker, stop it),
# then the number of processes the sandbox's PID namespace holds while it rages.
FORK_BOMB_COUNT = (
    "import os, subprocess, sys, time\n"
    "bomb = 'import os\\nwhile True:\\n    try:\\n        os.fork()\\n    except OSError:\\n        pass'\n"
    "subprocess.Popen([sys.executable, '-c', bomb])\n"
    "time.sleep(1.5)\n"
    "tasks = sum(len(os.listdir(f'/proc/{p}/task')) for p in os.listdir('/proc') if p.isdigit()"
    " and os.path.isdir(f'/proc/{p}/task'))\n"
    "print('tasks', tasks)"
)
