"""Tiny part packages built as real wheels, shaped like the model part packages on PyPI."""

from __future__ import annotations

import base64
import hashlib
import zipfile
from pathlib import Path

from fleet_rlm.models.local import ModelSpec

PART_INIT = (
    "import os\n"
    "def get_part_path():\n"
    "    return os.path.join(os.path.dirname(os.path.abspath(__file__)), 'data', 'part{index:02d}.bin')\n"
)


def _record_line(name: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def build_part_wheel(directory: Path, package: str, version: str, index: int, payload: bytes) -> Path:
    module = package.replace("-", "_")
    info = f"{module}-{version}.dist-info"
    files = {
        f"{module}/__init__.py": PART_INIT.format(index=index).encode(),
        f"{module}/data/part{index:02d}.bin": payload,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {package}\nVersion: {version}\n".encode(),
        f"{info}/WHEEL": b"Wheel-Version: 1.0\nGenerator: fleet-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
        f"{info}/top_level.txt": f"{module}\n".encode(),
    }
    record = [_record_line(name, data) for name, data in files.items()] + [f"{info}/RECORD,,"]
    files[f"{info}/RECORD"] = ("\n".join(record) + "\n").encode()
    wheel = directory / f"{module}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w") as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return wheel


def local_model(directory: Path, payloads: list[bytes], *, sha256: str | None = None) -> ModelSpec:
    """A model in ``len(payloads)`` part wheels under ``directory``; its sha256 is that of the joined payloads
    unless given."""
    directory.mkdir(parents=True, exist_ok=True)
    package, version = "fleet-test-model-part{index}", "1.0.0"
    for index, payload in enumerate(payloads, start=1):
        build_part_wheel(directory, package.format(index=index), version, index, payload)
    joined = b"".join(payloads)
    return ModelSpec(
        size="test",
        title="test model",
        alias="test-model",
        package=package,
        parts=len(payloads),
        version=version,
        sha256=sha256 or hashlib.sha256(joined).hexdigest(),
        total_bytes=len(joined),
        find_links=directory,
    )
