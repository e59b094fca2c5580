"""The real local model as session fixtures, prepared before the first test so that a download or a build
never counts against a test's timeout. Skip all of it with ``-m "not real_model"``."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from fleet_rlm.models.local import LARGE, SMALL, ModelSpec, RealModelError, RealModelServer, prepare
from fleet_rlm.models.local.speed import Speed

FIXTURES: dict[str, ModelSpec] = {"small_model": SMALL, "large_model": LARGE}


@dataclass(frozen=True)
class TurnRecord:
    test: str
    model: str
    status: str
    seconds: float
    speed: str
    text: str


RECORDS: list[TurnRecord] = []
PACES: list[str] = []
PREPARE_ERRORS: dict[str, str] = {}


def pytest_collection_finish(session: pytest.Session) -> None:
    wanted: dict[str, ModelSpec] = {}
    for item in session.items:
        if item.get_closest_marker("real_model") is not None:
            wanted[SMALL.size] = SMALL  # what tests that start their own server use
        wanted.update({spec.size: spec for name, spec in FIXTURES.items() if name in item.fixturenames})
    if not wanted:
        return
    capture = session.config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():
        for spec in wanted.values():
            try:
                prepare(spec)
            except RealModelError as exc:  # the tests that need it fail with this; the others run
                PREPARE_ERRORS[spec.size] = str(exc)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    if not RECORDS and not PACES:
        return
    terminalreporter.section("real-model turns")
    for pace in PACES:
        terminalreporter.write_line(pace)
    for record in RECORDS:
        terminalreporter.write_line(
            f"{record.test}: {record.model} {record.status} in {record.seconds:.1f}s "
            f"({record.speed}): {record.text[:200]!r}"
        )


def serve(spec: ModelSpec) -> Iterator[RealModelServer]:
    if spec.size in PREPARE_ERRORS:
        pytest.fail(f"the {spec.size} real model could not be prepared: {PREPARE_ERRORS[spec.size]}")
    with RealModelServer(spec) as server:
        yield server


@pytest.fixture(scope="session")
def small_model() -> Iterator[RealModelServer]:
    """The 0.5B model, for plumbing: fast, and follows DSPy's format only sometimes."""
    yield from serve(SMALL)


@pytest.fixture(scope="session")
def large_model() -> Iterator[RealModelServer]:
    """The 1.5B coder model, for true answers."""
    yield from serve(LARGE)


@pytest.fixture(scope="session")
def large_pace(large_model: RealModelServer) -> Speed:
    """How fast this machine runs the large model, measured once: its tests' deadlines scale with it."""
    pace = large_model.measure_pace()
    PACES.append(f"{large_model.spec.alias}'s pace on this machine, measured first: {pace.describe()}")
    return pace


@pytest.fixture
def record_turn() -> Iterator[list[TurnRecord]]:
    """Turns a test appends here are listed in the run's summary (the answers of a real model vary)."""
    records: list[TurnRecord] = []
    yield records
    RECORDS.extend(records)
