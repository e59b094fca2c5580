"""Skills in turns: installed read-only under skills/, listed by name and description, read with code."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from fleet_rlm.models.scripted import rlm_step
from fleet_rlm.protocol.events import EventType
from fleet_rlm.skills.catalog import BUNDLED_DIR
from fleet_rlm.testing.skills import write_skill

from .conftest import Harness

SALES = "region,quarter,revenue\nnorth,Q1,100\nsouth,Q1,80\nnorth,Q2,70\nsouth,Q2,120\neast,Q2,5\n"

READ_SKILL = "print(open('skills/tabular/SKILL.md').read())"

USE_HELPER = """import importlib.util
_spec = importlib.util.spec_from_file_location("tabular_helpers", "skills/tabular/helpers.py")
tab = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(tab)
print(tab.profile("files/sales.csv"))
totals = tab.aggregate(tab.read_rows("files/sales.csv"), by="region", values={"revenue": "sum"})
tab.write_csv(totals, "artifacts/revenue_by_region.csv")
SUBMIT(answer=", ".join(f"{row['region']}: {row['revenue']}" for row in totals))"""


@pytest.fixture
def places(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """The project's and the user's skill directories of this test (both empty to start with)."""
    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.chdir(project)
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    return project / ".fleet" / "skills", tmp_path / "config" / "fleet" / "skills"


def prompt_of(request: dict[str, object]) -> str:
    return json.dumps(request["messages"])


def test_a_turn_reads_a_skill_and_computes_with_its_helper(harness: Harness, places: tuple[Path, Path]) -> None:
    harness.server.script(
        "root", rlm_step("Read the tabular skill first.", READ_SKILL), rlm_step("Use its helper.", USE_HELPER)
    )
    run = harness.run("Revenue by region; save a CSV", {"sales.csv": SALES})

    assert run.outcome.status == "completed", run.outcome.error
    assert run.outcome.answer == "east: 5, north: 170, south: 200"
    output = run.output_text()
    assert "# Tabular analysis" in output and "Load the helpers" in output
    assert "5 rows, 3 columns" in output
    assert (run.workspace / "artifacts" / "revenue_by_region.csv").read_text() == (
        "region,revenue\neast,5\nnorth,170\nsouth,200\n"
    )
    assert [a["path"] for a in run.outcome.artifacts] == ["artifacts/revenue_by_region.csv"]
    installed = run.workspace / "skills" / "tabular" / "SKILL.md"
    assert installed.read_bytes() == (BUNDLED_DIR / "tabular" / "SKILL.md").read_bytes()
    assert installed.stat().st_mode & 0o777 == 0o444
    first = prompt_of(harness.server.model.requests_for("root")[0])
    assert "files/sales.csv" in first
    assert "skills/tabular/helpers.py" not in first  # the manifest leaves skills/ out


def test_instructions_list_skill_names_and_descriptions_not_bodies(harness: Harness, places: tuple[Path, Path]) -> None:
    project, user = places
    write_skill(project, "notes", "Keep meeting notes tidy.", body="SECRET-BODY-MARKER: never in the prompt\n")
    write_skill(user, "tabular", "The user's own table rules.", body="USER-BODY-MARKER\n")
    harness.server.script("root", rlm_step("Done.", "SUBMIT(answer='ok')"))
    run = harness.run("Anything")

    assert run.outcome.status == "completed", run.outcome.error
    prompt = prompt_of(harness.server.model.requests_for("root")[0])
    assert "- notes: Keep meeting notes tidy." in prompt
    assert "- tabular: The user's own table rules." in prompt  # the user's skill replaces the bundled one
    assert "- charts: Draw bar, line, scatter and histogram charts" in prompt
    assert "- map-reduce: " in prompt and "- pdf-text: " in prompt
    assert "SECRET-BODY-MARKER" not in prompt and "USER-BODY-MARKER" not in prompt
    assert "Reconcile: the sum of the groups" not in prompt  # nor a bundled skill's body
    assert (run.workspace / "skills" / "tabular" / "SKILL.md").read_text().endswith("USER-BODY-MARKER\n")


def test_a_broken_skill_is_a_warning_without_host_paths(harness: Harness, places: tuple[Path, Path]) -> None:
    project, _ = places
    broken = project / "notes"
    broken.mkdir(parents=True)
    (broken / "SKILL.md").write_text("---\nname: notes\n---\n")
    harness.server.script("root", rlm_step("Done.", "SUBMIT(answer='ok')"))
    run = harness.run("Anything")

    warnings = [str(e.data["message"]) for e in run.of(EventType.WARNING)]
    assert "project skill notes/SKILL.md: front matter: 'description' is missing" in warnings
    assert not any(str(project) in message for message in warnings)
    assert "- notes:" not in prompt_of(harness.server.model.requests_for("root")[0])


TAMPER = """import os
tries = {}
for name, attempt in [
    ("edit", lambda: open("skills/tabular/SKILL.md", "a").write("injected")),
    ("add", lambda: open("skills/tabular/new.py", "w").write("x = 1")),
    ("remove", lambda: os.remove("skills/tabular/helpers.py")),
    ("chmod", lambda: os.chmod("skills/tabular/SKILL.md", 0o666)),
]:
    try:
        attempt()
        tries[name] = "done"
    except PermissionError:
        tries[name] = "refused"
SUBMIT(answer=str(sorted(tries.items())))"""


@pytest.mark.skipif(os.geteuid() != 0, reason="sandboxes run as a uid of their own only when the host is root")
def test_sandbox_code_cannot_change_the_installed_skills(harness: Harness, places: tuple[Path, Path]) -> None:
    harness.server.script("root", rlm_step("Tamper.", TAMPER))
    run = harness.run("Anything")

    assert run.outcome.status == "completed", run.outcome.error
    assert run.outcome.answer == str(
        sorted({"edit": "refused", "add": "refused", "remove": "refused", "chmod": "refused"}.items())
    )
    installed = run.workspace / "skills" / "tabular"
    assert sorted(p.name for p in installed.iterdir()) == ["SKILL.md", "helpers.py"]
    assert (installed / "SKILL.md").read_bytes() == (BUNDLED_DIR / "tabular" / "SKILL.md").read_bytes()


CHILD_READS = "SUBMIT(answer=open('skills/pdf-text/SKILL.md').read().splitlines()[1])"


def test_child_agents_get_the_skills_from_the_host_not_from_their_parent(
    harness: Harness, places: tuple[Path, Path]
) -> None:
    parent = (
        "import os\nos.rename('skills', 'old-skills')\n"
        "os.makedirs('skills/pdf-text')\nopen('skills/pdf-text/SKILL.md', 'w').write('---\\nname: forged\\n')\n"
        "r = spawn_agent('CHILD read a skill')\nSUBMIT(answer=r['answer'])"
    )
    harness.server.script_for_task("root", "PARENT", rlm_step("Delegate.", parent))
    harness.server.script_for_task("root", "CHILD", rlm_step("Read.", CHILD_READS))
    run = harness.run("PARENT")

    assert run.outcome.status == "completed", run.outcome.error
    assert run.outcome.answer == "name: pdf-text"
    child_request = next(r for r in harness.server.model.requests if "CHILD read a skill" in prompt_of(r))
    assert "- pdf-text: Extract text from PDF" in prompt_of(child_request)


def test_a_long_document_is_map_reduced_with_llm_query_batched(harness: Harness, places: tuple[Path, Path]) -> None:
    paragraphs = [f"Section {i}. Routine operations continued without notable events." for i in range(40)]
    paragraphs[27] = "Section 27. The plant in Leeds produced 4,812 units in March."
    code = """import importlib.util
_spec = importlib.util.spec_from_file_location("map_reduce_helpers", "skills/map-reduce/helpers.py")
mr = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(mr)
text = open("files/log.txt").read()
result = mr.map_reduce(text, "How many units did Leeds produce?", llm_query_batched, llm_query, chunk_chars=600, overlap=0)
print(result["chunks"], result["calls"], result["partials"])
SUBMIT(answer=result["answer"])"""

    def sub_model(request: dict[str, object]) -> str:
        prompt = str(request["messages"])
        if "Partial answers to one question" in prompt:
            return "Leeds produced 4,812 units in March [chunk 5]." if "4,812" in prompt else "unknown"
        return "Leeds: 4,812 units (March)." if "4,812 units" in prompt else "NONE"

    harness.server.model.default = sub_model
    harness.server.script("root", rlm_step("Map-reduce it.", code))
    run = harness.run("How many units did Leeds produce?", {"log.txt": "\n\n".join(paragraphs)})

    assert run.outcome.status == "completed", run.outcome.error
    assert run.outcome.answer == "Leeds produced 4,812 units in March [chunk 5]."
    chunks = int(run.output_text().split()[0])
    assert chunks > 4
    assert run.outcome.usage["sub_calls"] == chunks + 1
