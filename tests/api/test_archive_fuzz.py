"""Fuzzing the session archive format: archives mutated from a real export, one value replaced or
removed anywhere in the manifest or an event, or the packed bytes cut or flipped. The import answers
2xx or 4xx, never 5xx or a hang; a refused import stores nothing, and an accepted one streams each
turn's events to their end. Bounded (examples, deadline) to stay fast in CI."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import httpx
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleet_rlm.models.scripted import ScriptedModelServer

from .server import RunningServer
from .test_hostile_archives import exported, rewrite, stored_state

Path = tuple[str | int, ...]
EXAMPLES = 40

_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.sampled_from([0, -1, 2**31 - 1, 2**31, 2**63, -(2**63) - 1])
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40)
    | st.sampled_from(["0001-01-01T00:00:00+14:00", "9999-12-31T23:59:59-14:00", "memory/MEMORIES.md", "a\r\nb"])
)
VALUES = st.recursive(
    _scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
)
REMOVED = object()


def paths_in(value: object, prefix: Path = ()) -> list[Path]:
    """Every place in a JSON value, the value itself first."""
    found = [prefix]
    if isinstance(value, dict):
        for key, inner in value.items():
            found += paths_in(inner, (*prefix, key))
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            found += paths_in(inner, (*prefix, index))
    return found


def replaced(root: Any, path: Path, value: object) -> Any:
    """``root`` with the value at ``path`` replaced by ``value`` (removed for REMOVED); in place."""
    if not path:
        return value
    parent = root
    for step in path[:-1]:
        parent = parent[step]
    if value is REMOVED:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return root


def assert_import_answers(http: httpx.Client, api: RunningServer, archive: bytes, before: object) -> None:
    answer = http.post("/sessions/import", files={"archive": ("a.tar.gz", archive)}, data={"name": "fuzzed"})
    assert answer.status_code < 500, answer.text
    if answer.status_code >= 400:
        assert stored_state(http, api) == before, answer.text
        return
    assert answer.status_code == 201, answer.text
    for turn in http.get("/sessions/fuzzed/turns").json()["items"]:
        with http.stream("GET", f"/turns/{turn['id']}/events") as stream:
            assert stream.status_code == 200
            for _ in stream.iter_lines():  # ends (a read timeout fails the test)
                pass
    assert http.delete("/sessions/fuzzed").status_code < 300


def test_mutated_archives_are_answered_with_2xx_or_4xx(api: RunningServer, model_server: ScriptedModelServer) -> None:
    with api.http() as http:
        archive = exported(http, model_server)
        manifest_paths: list[Path] = []
        event_paths: list[Path] = []

        def note_manifest(manifest: dict[str, Any]) -> None:
            manifest_paths.extend(paths_in(manifest)[1:])

        def note_events(lines: list[dict[str, Any]]) -> None:
            event_paths.extend(paths_in(lines)[1:])

        rewrite(archive, manifest=note_manifest, events=note_events)
        before = stored_state(http, api)
        fuzz = settings(
            max_examples=EXAMPLES,
            deadline=dt.timedelta(seconds=10),
            suppress_health_check=[HealthCheck.too_slow],
            database=None,
        )

        @fuzz
        @given(
            where=st.sampled_from(["manifest", "events"]),
            index=st.integers(min_value=0),
            value=VALUES | st.just(REMOVED),
        )
        def a_value_changed(where: str, index: int, value: object) -> None:
            paths = manifest_paths if where == "manifest" else event_paths
            path = paths[index % len(paths)]
            changed = json.loads(json.dumps(value)) if value is not REMOVED else REMOVED
            change = {"manifest" if where == "manifest" else "events": lambda root: replaced(root, path, changed)}
            assert_import_answers(http, api, rewrite(archive, **change), before)  # type: ignore[arg-type]

        @fuzz
        @given(cut=st.integers(min_value=0, max_value=len(archive)), flip=st.integers(min_value=0))
        def bytes_changed(cut: int, flip: int) -> None:
            damaged = bytearray(archive[:cut] if cut < len(archive) // 2 else archive)
            if damaged:
                damaged[flip % len(damaged)] ^= 0xFF
            assert_import_answers(http, api, bytes(damaged), before)

        a_value_changed()
        bytes_changed()
