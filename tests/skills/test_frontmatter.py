"""SKILL.md front matter: what parses, and errors that name the file, the line and the problem."""

from __future__ import annotations

import pytest

from fleet_rlm.skills import SkillFormatError, parse_skill_md

WHERE = "/skills/report/SKILL.md"


def test_name_description_and_body() -> None:
    text = "---\nname: report\ndescription: Write reports.\nlicense: MIT\n---\n# Report\nSteps.\n"
    header = parse_skill_md(text, WHERE)
    assert (header.name, header.description) == ("report", "Write reports.")
    assert header.body == "# Report\nSteps.\n"


def test_yaml_forms_other_skill_tools_write_are_accepted() -> None:
    text = (
        "\ufeff---\r\n"
        'name: "report"\r\n'
        "description: >\r\n  Write reports: long ones,\r\n  and short ones.\r\n"
        "metadata:\r\n  version: 2\r\n"
        "---\r\nbody\r\n"
    )
    header = parse_skill_md(text, WHERE)
    assert header.name == "report"
    assert header.description == "Write reports: long ones, and short ones."


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("# Report\nno front matter\n", "must start with a front matter block"),
        ("---\nname: report\ndescription: x\n", "not closed by a '---' line"),
        ("---\nname: report\n---\n", "front matter: 'description' is missing"),
        ("---\ndescription: x\n---\n", "front matter: 'name' is missing"),
        ("---\nname: report\ndescription:\n---\n", "'description' must be a string, not empty"),
        ("---\nname: report\ndescription: '  '\n---\n", "front matter: 'description' is empty"),
        ("---\nname: yes\ndescription: x\n---\n", "'name' must be a string, not a bool (True); quote it"),
        ("---\nname: report\ndescription: [a, b]\n---\n", "'description' must be a string, not a list"),
        ("---\nname: Report Writer\ndescription: x\n---\n", "'name' 'Report Writer' is not a valid skill name"),
        ("---\nname: ../etc\ndescription: x\n---\n", "is not a valid skill name"),
        ("---\n- name\n- description\n---\n", "must be 'key: value' lines (a mapping), not a list"),
        ("---\n---\n", "not nothing"),
        ("---\nname: report\nname: other\ndescription: x\n---\n", "line 3: \"the key 'name' appears twice\""),
        ("---\nname: report\ndescription: Use when: asked\n---\n", "not valid YAML (line 3: 'mapping values"),
        ("---\nname: report\ndescription: !!python/object/apply:os.system [echo]\n---\n", "not valid YAML"),
        ("---\nname: report\ndescription: " + "x" * 1025 + "\n---\n", "longer than 1024 characters"),
        ("---\nname: report\ndescription: x\nnotes: " + "y" * 20_000 + "\n---\n", "longer than 16384 characters"),
    ],
)
def test_bad_front_matter_is_refused_naming_the_file_and_the_problem(text: str, problem: str) -> None:
    with pytest.raises(SkillFormatError) as caught:
        parse_skill_md(text, WHERE)
    message = str(caught.value)
    assert message.startswith(f"{WHERE}: "), message
    assert problem in message, message
