"""What a failed execution is told on top of its error: the causes the host sees and a small model does not
(each seen with a real 1.5B model, which ran the same failing code until the loop guard stopped it)."""

from __future__ import annotations

from typing import Any

import pytest

from fleet_rlm.engine.adapters import CODE_IN_JSON
from fleet_rlm.engine.hints import FailureHints, cut_off_hint, undefined_name_hint
from fleet_rlm.models.scripted import json_reply, rlm_step
from fleet_rlm.protocol.events import EventType

from .conftest import Harness


def prompt(request: dict[str, Any]) -> str:
    return "\n".join(str(message["content"]) for message in request["messages"])


NEEDLE_SEARCH = """import re
content = open('files/archive.txt').read()
match = re.search(r'vault access code: (.+)', content)
if match:
    vault_access_code = match.group(1)
print(vault_access_code)"""

TOTALS = """import pandas as pd
regions = ['east', 'north']
totals = {}
for file in ['files/east.csv', 'files/north.csv']:
    df = pd.read_csv(file)
    totals[region] = df['revenue'].sum()"""


@pytest.mark.parametrize(
    ("code", "name", "told"),
    [
        (
            NEEDLE_SEARCH,
            "vault_access_code",
            "[Fleet] `vault_access_code` is set only under `if match:` in this code, and that line never ran: "
            "`match` was false, so the search found no match for 'vault access code: (.+)': the text says it "
            "differently. Look at the lines that hold a key word first, such as:\n"
            "print([line for line in content.splitlines() if 'access' in line.lower()][:5])",
        ),
        (
            "for line in lines:\n    if 'x' in line:\n        found = line\nprint(found)",
            "found",
            "[Fleet] `found` is set only under `for line in lines:` → `if 'x' in line:` in this code, and that "
            "line never ran: `'x' in line` was never true.",
        ),
        (
            "if rows:\n    pass\nelse:\n    empty = True\nprint(empty)",
            "empty",
            "[Fleet] `empty` is set only under `if rows:` in this code, and that line never ran: `rows` was true.",
        ),
        (
            "def total(rows):\n    result = sum(rows)\ntotal([1])\nprint(result)",
            "result",
            "[Fleet] `result` is set only inside the function `def total(...)`: it is local to it. Return it instead.",
        ),
        (
            "try:\n    value = int('x')\nexcept ValueError:\n    pass\nprint(value)",
            "value",
            "[Fleet] `value` is set only under `try:` in this code, where an error was raised and caught before "
            "it was set: print the error instead of passing over it.",
        ),
        (
            "df = pd.read_csv('files/a.csv')",
            "pd",
            "[Fleet] `pd` was never imported in this sandbox: start the code with `import pandas as pd`.",
        ),
        (
            TOTALS,
            "region",
            "[Fleet] Nothing has set `region`: not this code, nor an earlier execution. The names this code sets: "
            "`pd`, `regions`, `totals`, `file`, `df`.",
        ),
    ],
)
def test_a_name_error_says_why_the_name_was_never_set(code: str, name: str, told: str) -> None:
    assert undefined_name_hint(code, f"name '{name}' is not defined") == told


@pytest.mark.parametrize(
    ("code", "name"),
    [
        ("print(total)\ntotal = 3", "total"),  # set at the top level, used before that line: the error says it all
        ("print(x)", "x"),  # sets nothing at all
        ("print(undefined", "undefined"),  # does not parse
    ],
)
def test_a_name_error_fleet_cannot_explain_gets_no_hint(code: str, name: str) -> None:
    assert undefined_name_hint(code, f"name '{name}' is not defined") is None
    assert undefined_name_hint("x = 1", "a message of another shape") is None


def test_code_cut_off_in_the_middle_of_a_statement_is_told_about_the_quote_that_ended_it() -> None:
    cut = "import pandas as pd\nfor review in reviews:\n    label = llm_query(f'Classify: {review["
    told = cut_off_hint(cut)
    assert told is not None
    assert told.startswith(
        "[Fleet] Your code stops in the middle of a statement, at `label = llm_query(f'Classify: {review[`"
    )
    assert "Write the strings in your code with single quotes ('text')" in told
    assert cut_off_hint("print(len(df[df[") is not None
    for whole in ("x = 1", "print('a')\n", "x = (1 +", ""):
        assert (cut_off_hint(whole) is None) is (whole != "x = (1 +")


def test_only_a_json_reply_is_told_its_code_was_cut_by_a_quote() -> None:
    cut = "print(f'{row["
    assert FailureHints(json_replies=True).hint(cut, "SyntaxError", "unterminated string literal") is not None
    assert FailureHints(json_replies=False).hint(cut, "SyntaxError", "unterminated string literal") is None


JOIN_TABLES = {
    "files/customers.csv": ("customer_id", "name", "country"),
    "files/orders.csv": ("order_id", "customer_id", "amount"),
}


def test_a_missing_column_is_found_in_the_other_file_of_a_join() -> None:
    hints = FailureHints(tables=JOIN_TABLES)
    assert hints.hint("", "KeyError", "'amount'") == (
        "[Fleet] The table this code indexed has no column 'amount'. In the input files, 'amount' is a column of "
        "files/orders.csv. The input tables' columns: files/customers.csv: customer_id, name, country; "
        "files/orders.csv: order_id, customer_id, amount. To use columns of two files, read both by their paths "
        "and merge them on a column they share (customer_id)."
    )
    assert hints.hint("", "KeyError", "'Amount'") == (
        "[Fleet] No input table has a column 'Amount'; files/orders.csv has 'amount' (names must match exactly)."
    )
    for message in ("'total'", "3", "('a', 'b')", ""):
        assert hints.hint("", "KeyError", message) is None


def test_a_path_that_is_not_a_file_is_shown_the_input_it_meant() -> None:
    """Seen with a real 1.5B model: it opened each line of `workspace` as a path, size and digest included."""
    hints = FailureHints(inputs=["files/archive.txt", "files/orders.csv"])
    line = "files/archive.txt  (1.9 MiB, text, 23,027 lines, sha256 006a7d67c21f)"
    assert hints.hint("", "FileNotFoundError", f"[Errno 2] No such file or directory: {line!r}") == (
        f"[Fleet] There is no file {line!r}: the file's path is 'files/archive.txt'. The rest of its line in "
        "`workspace` describes it (size, kind, sha256): `workspace` is a listing to read, not paths to open."
    )
    hints.reading = "text = open('files/archive.txt').read()"
    told = hints.hint("", "FileNotFoundError", f"[Errno 2] No such file or directory: {line!r}")
    assert told is not None and told.endswith(
        "not paths to open. Do not loop over its lines; open the file by its path, such as:\n"
        "text = open('files/archive.txt').read()"
    )
    for missing in ("archive.txt", "files/order.csv"):
        told = hints.hint("", "FileNotFoundError", f"[Errno 2] No such file or directory: {missing!r}")
        assert told is not None and told.startswith(f"[Fleet] There is no file {missing!r}; the input file nearest")
    assert hints.hint("", "FileNotFoundError", "[Errno 2] No such file or directory: 'zzz/qqq.bin'") is None
    assert FailureHints().hint("", "FileNotFoundError", "[Errno 2] No such file or directory: 'a.txt'") is None


def test_a_hostile_error_message_gets_no_hint_and_breaks_nothing() -> None:
    """The error's message is whatever the guest raised."""
    hints = FailureHints(json_replies=True, inputs=list(JOIN_TABLES), tables=JOIN_TABLES)
    for message in ("[" * 100_000, "(" * 5000 + "'amount'" + ")" * 5000, "'" + "a" * 1_000_000 + "'", "\x00'amount'"):
        assert hints.hint("x = 1", "KeyError", message) is None
    assert hints.hint("(" * 100_000, "SyntaxError", "too many nested parentheses") is None
    assert hints.hint("x = 1", "NameError", "name '" + "a" * 100_000) is None
    for message in ("No such file or directory: '" + "\\" * 100_000, "No such file or directory: '\\x00' + 1"):
        assert hints.hint("x = 1", "FileNotFoundError", message) is None


def test_a_join_that_looked_up_a_column_in_the_wrong_file_is_shown_where_it_is(harness: Harness) -> None:
    """Seen with a real 1.5B model: it summed `amount` over the customers file four times in a row."""
    wrong = (
        "import pandas as pd\ndf = pd.read_csv('files/customers.csv')\nprint(df[df['country'] == 'NO']['amount'].sum())"
    )
    joined = (
        "orders = pd.read_csv('files/orders.csv')\nm = orders.merge(df, on='customer_id')\n"
        "SUBMIT(answer=str(m[m['country'] == 'NO']['amount'].sum()))"
    )
    harness.server.script("root", rlm_step("Sum it.", wrong), rlm_step("Join.", joined))
    files = {
        "customers.csv": "customer_id,name,country\n1,a,NO\n2,b,SE\n",
        "orders.csv": "order_id,customer_id,amount\n1,1,5\n2,2,7\n3,1,4\n",
    }

    run = harness.run("Total amount of orders.csv for customers.csv's NO customers?", files)

    assert (run.outcome.status, run.outcome.answer, run.outcome.unverified) == ("completed", "9", False)
    told = prompt(harness.server.model.requests_for("root")[1])
    assert "In the input files, 'amount' is a column of files/orders.csv." in told
    assert "merge them on a column they share (customer_id)" in told
    [failed] = run.of(EventType.EXECUTION_FAILED)
    assert failed.data["error_type"] == "KeyError"


def test_a_json_reply_whose_code_a_quote_cut_off_is_told_so_and_goes_on(harness: Harness) -> None:
    """Seen with a real 1.5B model: ``f'...{review["text"]}'`` in a JSON reply arrived as ``f'...{review[``."""
    harness.server.model.json_schema = "honour"
    harness.server.script(
        "root",
        json_reply(ok=True),
        json_reply(reasoning="Label them.", code="label = llm_query(f'Positive? {review["),
        json_reply(reasoning="Single quotes.", code="SUBMIT(answer='1 3')"),
    )

    run = harness.run("Which reviews are positive?")

    assert (run.outcome.status, run.outcome.answer) == ("completed", "1 3")
    requests: list[dict[str, Any]] = harness.server.model.requests_for("root")
    assert CODE_IN_JSON in requests[1]["messages"][0]["content"]
    told = prompt(requests[2])
    assert "Your code stops in the middle of a statement, at `label = llm_query(f'Positive? {review[`" in told
