from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fleet_rlm.models.scripted import ScriptedModelServer


@pytest.fixture
def model_server() -> Iterator[ScriptedModelServer]:
    with ScriptedModelServer(stream_chunk_chars=12) as server:
        yield server


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "fleet-home"
    path.mkdir()
    return path
