"""The private virtual environment that serves the model: llama-cpp-python's OpenAI-compatible server,
built from source with this machine's compilers (uv keeps the built wheel in its own cache)."""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
import sys
import time
from pathlib import Path

from fleet_rlm.models.local.cache import RealModelError, cache_lock, find_uv, progress, run_logged

LLAMA_CPP_VERSION = "0.3.36"
REQUIREMENT = f"llama-cpp-python[server]=={LLAMA_CPP_VERSION}"
_CHECK = "import llama_cpp, llama_cpp.server.app; print(llama_cpp.__version__)"
# llama.cpp is compiled for this CPU (-march=native), except Intel AMX: a CPU may list the AMX tile
# instructions while Linux refuses them to a process that did not ask for them (arch_prctl), and ggml
# does not ask, so its first matrix product dies with a general protection fault (seen on Xeon machines
# here). GCC lets an explicit -mno-<isa> win over what -march=native implies, wherever it stands.
_NO_AMX = "-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
CMAKE_ARGS = (
    f"-DCMAKE_C_FLAGS='{_NO_AMX}' -DCMAKE_CXX_FLAGS='{_NO_AMX}'" if platform.machine() in ("x86_64", "AMD64") else ""
)


def runtime_dir(root: Path) -> Path:
    return root / f"runtime-llama-cpp-python-{LLAMA_CPP_VERSION}"


def runtime_python(root: Path) -> Path:
    return runtime_dir(root) / "bin" / "python"


def ensure_runtime(root: Path) -> Path:
    """The runtime's Python interpreter, installing the runtime first if it is not ready."""
    if _ready(root):
        return runtime_python(root)
    with cache_lock(root, "the real model's runtime"):
        if _ready(root):
            return runtime_python(root)
        _install(root)
    return runtime_python(root)


def _stamp(root: Path) -> Path:
    return runtime_dir(root) / ".fleet-ready"


def _stamp_text() -> str:
    """What the runtime was built for: llama.cpp is compiled for this CPU's instruction set."""
    return f"{REQUIREMENT}\ncpu {cpu_fingerprint()}\ncmake {CMAKE_ARGS}\n"


def cpu_fingerprint() -> str:
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.machine()
    flags = next((line.split(":", 1)[1] for line in info.splitlines() if line.startswith(("flags", "Features"))), "")
    digest = hashlib.sha256(" ".join(sorted(flags.split())).encode()).hexdigest()[:16]
    return f"{platform.machine()}-{digest}"


def _ready(root: Path) -> bool:
    try:
        return _stamp(root).read_text() == _stamp_text() and runtime_python(root).is_file()
    except OSError:
        return False


def _install(root: Path) -> None:
    venv = runtime_dir(root)
    uv = find_uv()
    # A runtime built on another CPU or with other build options must not come back from uv's wheel
    # cache (its key knows neither): build it again.
    other_build = _stamp(root).is_file() and _stamp(root).read_text() != _stamp_text()
    env = {k: v for k, v in os.environ.items() if k != "VIRTUAL_ENV"} | {"CMAKE_ARGS": CMAKE_ARGS}
    shutil.rmtree(venv, ignore_errors=True)
    started = time.monotonic()
    progress(f"installing {REQUIREMENT} into {venv} (built from source the first time: minutes)")
    run_logged([uv, "venv", "--quiet", "--python", sys.executable, str(venv)], "creating the runtime", env=env)
    install = [uv, "pip", "install", "--python", str(runtime_python(root)), REQUIREMENT]
    if other_build:
        install += ["--refresh-package", "llama-cpp-python"]
    run_logged(install, f"installing {REQUIREMENT}", env=env)
    check = subprocess.run([str(runtime_python(root)), "-c", _CHECK], capture_output=True, text=True, check=False)
    if check.returncode != 0 or check.stdout.strip() != LLAMA_CPP_VERSION:
        raise RealModelError(f"the runtime in {venv} does not import llama_cpp {LLAMA_CPP_VERSION}: {check.stderr}")
    _stamp(root).write_text(_stamp_text())
    progress(f"runtime ready in {time.monotonic() - started:.1f}s")
