"""How the root model is asked for its replies and how they are read: its earlier iterations as a
conversation. Exact behaviour against the scripted model."""

from __future__ import annotations

from fleet_rlm.models.scripted import rlm_step

from .conftest import Harness

SALES = "region,revenue\nnorth,100\nsouth,80\nnorth,70\n"


def test_each_earlier_iteration_is_the_models_own_message_followed_by_its_output(harness: Harness) -> None:
    """A 1.5B model shown its earlier iterations as one block of text wrote its first step again at every
    iteration; as a conversation it goes on from where it was."""
    harness.server.script(
        "root",
        rlm_step("Look at the data.", "print(open('files/sales.csv').read().splitlines()[0])"),
        rlm_step("Count the rows.", "print(len(open('files/sales.csv').read().splitlines()) - 1)"),
        rlm_step("Submit.", "SUBMIT(answer='3 rows')"),
    )
    run = harness.run("How many rows?", {"sales.csv": SALES}, max_iterations=5)

    assert (run.outcome.status, run.outcome.answer) == ("completed", "3 rows")
    third = harness.server.model.requests_for("root")[2]["messages"]
    assert [m["role"] for m in third] == ["system", "user", "assistant", "user", "assistant", "user"]
    first, step1, out1, step2, out2 = (m["content"] for m in third[1:])
    assert "You have not interacted with the REPL environment yet." in first and "1/5" in first
    assert "Variable: `task`" in first and "Variable: `task`" not in out2
    assert step1.startswith("[[ ## reasoning ## ]]\nLook at the data.") and "splitlines()[0])\n```" in step1
    assert out1.startswith("Output (14 chars):\nregion,revenue\n") and out1.endswith("[[ ## iteration ## ]]\n2/5")
    assert "Count the rows." in step2
    assert out2.startswith("Output (1 chars):\n3\n") and "[[ ## iteration ## ]]\n3/5" in out2
    assert out2.endswith("then ending with the marker for `[[ ## completed ## ]]`.")
    # The current request restates the task, which a small model otherwise loses sight of.
    assert "Your next step toward the task (How many rows?): build on the outputs above" in out2
    assert "Your next step" not in out1
