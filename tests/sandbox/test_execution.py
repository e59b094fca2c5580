"""Running code: results, persistent state, errors, SUBMIT and the input-variable cache."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from dspy.primitives.code_interpreter import CodeExecutionError, CodeInterpreterError, FinalOutput

from fleet_rlm.sandbox import replies
from fleet_rlm.sandbox.base import SandboxSpec
from fleet_rlm.sandbox.local import LocalSandboxBackend
from fleet_rlm.sandbox.local_sandbox import LocalSandbox

from .helpers import TEST_LIMITS, RecordingObserver


def test_output_is_returned_and_state_persists(sandbox: LocalSandbox) -> None:
    assert sandbox.execute("x = 20\nprint('x is', x)") == "x is 20"
    assert sandbox.execute("def double(n):\n    return 2 * n") is None
    assert sandbox.execute("double(x) + 2") == "42"  # a trailing expression shows, as in a REPL
    assert sandbox.isolated


def test_trailing_value_can_be_returned_as_dspy_interpreters_do(sandbox: LocalSandbox) -> None:
    sandbox.return_trailing_value = True
    assert sandbox.execute("print('shown')\n{'total': 2 + 3}") == {"total": 5}
    assert sandbox.execute("print('only output')\nNone") == "only output"
    assert sandbox.execute("object()").startswith("<object object at")  # not JSON: its repr


def test_runtime_error_is_recoverable_and_names_the_line(sandbox: LocalSandbox) -> None:
    with pytest.raises(CodeExecutionError) as caught:
        sandbox.execute("print('before')\nitems = [1]\nitems[5]")
    message = str(caught.value)
    assert message.startswith("before\n")  # what was printed before the failure is kept
    assert "IndexError: list index out of range" in message
    assert "line 3" in message and "items[5]" in message
    assert sandbox.execute("print(items)") == "[1]"


def test_syntax_error_is_raised_as_syntax_error(sandbox: LocalSandbox) -> None:
    with pytest.raises(SyntaxError, match=r"line 2"):
        sandbox.execute("a = 1\nb = = 2")
    assert sandbox.execute("print('still fine')") == "still fine"


def test_submit_with_typed_output_fields(sandbox: LocalSandbox) -> None:
    sandbox.output_fields = [{"name": "answer", "type": "str"}, {"name": "count", "type": "int"}]
    assert sandbox.execute("SUBMIT('yes', 3)") == FinalOutput({"answer": "yes", "count": 3})
    assert sandbox.execute("SUBMIT(count=4, answer='no')") == FinalOutput({"answer": "no", "count": 4})
    with pytest.raises(CodeExecutionError, match=r"SUBMIT is missing count; use SUBMIT\(answer, count\)"):
        sandbox.execute("SUBMIT(answer='only')")
    with pytest.raises(CodeExecutionError, match=r"field 'count' must be int, got str: '3'"):
        sandbox.execute("SUBMIT('yes', '3')")
    with pytest.raises(CodeExecutionError, match=r"unexpected extra"):
        sandbox.execute("SUBMIT(answer='a', count=1, extra=2)")


def test_submit_takes_a_computed_figure_as_text_and_explains_none(sandbox: LocalSandbox) -> None:
    sandbox.output_fields = [{"name": "answer", "type": "str"}]
    assert sandbox.execute("total = 12838\nSUBMIT(answer=total)") == FinalOutput({"answer": "12838"})
    assert sandbox.execute("SUBMIT(2.5)") == FinalOutput({"answer": "2.5"})
    # What pandas returns for a column's sum.
    numpy_total = "import numpy as np\nSUBMIT(answer=np.int64(29342))"
    assert sandbox.execute(numpy_total) == FinalOutput({"answer": "29342"})
    with pytest.raises(CodeExecutionError, match=r"must be str, got bool: np.True_"):
        sandbox.execute("import numpy as np\nSUBMIT(answer=np.bool_(True))")
    with pytest.raises(CodeExecutionError) as caught:
        sandbox.execute("import io\nSUBMIT(answer=io.StringIO().write('x') and None)")
    message = str(caught.value)
    assert "field 'answer' must be str, got NoneType" in message
    assert "return None" in message and "SUBMIT(answer=<the answer itself>)" in message
    with pytest.raises(CodeExecutionError, match=r"got bool: True; pass its text, e.g. SUBMIT\(answer=str\(value\)\)"):
        sandbox.execute("SUBMIT(answer=True)")
    with pytest.raises(CodeExecutionError, match=r"got set: \{1\}; pass its text"):
        sandbox.execute("SUBMIT(answer={1})")


def test_submit_takes_a_computed_table_or_list_as_the_text_it_prints(sandbox: LocalSandbox) -> None:
    """Seen with a real 1.5B model on the README's job: ``SUBMIT(region_revenue)``, a DataFrame, four times."""
    sandbox.output_fields = [{"name": "answer", "type": "str"}]
    table = "import pandas as pd\nt = pd.DataFrame({'region': ['east', 'north'], 'revenue': [6901, 7811]})\n"
    submitted = sandbox.execute(f"{table}SUBMIT(t)")
    assert submitted == FinalOutput({"answer": "```\n  region  revenue\n0   east     6901\n1  north     7811\n```"})
    assert sandbox.execute(f"{table}SUBMIT(answer=t.set_index('region')['revenue'])") == FinalOutput(
        {"answer": "```\nregion\neast     6901\nnorth    7811\n```"}
    )
    assert sandbox.execute("SUBMIT(answer=[1, 3, 5])") == FinalOutput({"answer": "[1, 3, 5]"})
    assert sandbox.execute("import numpy as np\nSUBMIT(answer=np.array([2, 4]))") == FinalOutput({"answer": "[2 4]"})
    # A table whose printing fails is the code's own error, raised under its deadline.
    failing = "import pandas as pd\nclass Bad(pd.DataFrame):\n    def to_string(self, *a, **k):\n        raise ValueError('no')\n"
    with pytest.raises(CodeExecutionError, match="ValueError: no"):
        sandbox.execute(f"{failing}SUBMIT(answer=Bad({{'a': [1]}}))")


def test_submit_without_output_fields_takes_one_value(sandbox: LocalSandbox) -> None:
    assert sandbox.execute("SUBMIT({'a': [1, 2]})") == FinalOutput({"output": {"a": [1, 2]}})


def test_bad_variable_names_and_values_are_refused(sandbox: LocalSandbox) -> None:
    with pytest.raises(CodeInterpreterError, match="invalid names: \\['SUBMIT'\\]"):
        sandbox.execute("pass", {"SUBMIT": 1})
    with pytest.raises(CodeInterpreterError, match="variable 'data' cannot be sent to the sandbox"):
        sandbox.execute("pass", {"data": object()})
    assert sandbox.execute("print('ok')", {"data": [1, 2.5, None, "x"]}) == "ok"


def test_unchanged_inputs_are_not_resent(sandbox: LocalSandbox) -> None:
    big = "a" * 1_000_000
    sandbox.execute("print(len(big))", {"big": big})
    first = sandbox.bytes_sent
    assert first > 1_000_000

    assert sandbox.execute("print(len(big))", {"big": big}) == "1000000"
    assert sandbox.bytes_sent - first < 2_000  # only the code and the variable's name travelled

    # Code may rebind an input; the next execution sees the input again without it being resent.
    sandbox.execute("big = 'reassigned'", {"big": big})
    before = sandbox.bytes_sent
    assert sandbox.execute("print(big[:3], len(big))", {"big": big}) == "aaa 1000000"
    assert sandbox.bytes_sent - before < 2_000

    # An equal but distinct string is recognised too; a changed one is sent.
    before = sandbox.bytes_sent
    sandbox.execute("pass", {"big": "a" * 1_000_000})
    assert sandbox.bytes_sent - before < 2_000
    sandbox.execute("pass", {"big": "b" * 1_000_000})
    assert sandbox.bytes_sent - before > 1_000_000
    assert sandbox.execute("print(big[:2])", {"big": "b" * 1_000_000}) == "bb"


def test_mutable_inputs_are_compared_by_content(sandbox: LocalSandbox) -> None:
    records = {"rows": list(range(50_000))}
    sandbox.execute("pass", {"records": records})
    before = sandbox.bytes_sent
    sandbox.execute("records['rows'].clear()", {"records": records})
    assert sandbox.bytes_sent - before < 2_000
    # The in-sandbox mutation does not stick: every execution starts from the value the host passed.
    assert sandbox.execute("print(len(records['rows']))", {"records": records}) == "50000"

    records["rows"].append(-1)  # changed on the host: sent again
    before = sandbox.bytes_sent
    assert sandbox.execute("print(records['rows'][-1])", {"records": records}) == "-1"
    assert sandbox.bytes_sent - before > 100_000


def test_bytes_and_tuple_inputs(sandbox: LocalSandbox) -> None:
    data = bytes(range(256))
    assert sandbox.execute("print(type(raw).__name__, len(raw), raw[255])", {"raw": data}) == "bytes 256 255"
    pair = ("a", 1)
    assert sandbox.execute("print(pair)", {"pair": pair}) == "['a', 1]"  # JSON has no tuples


def test_inputs_no_longer_passed_are_forgotten_but_stay_bound(sandbox: LocalSandbox) -> None:
    first = "1" * 10_000
    sandbox.execute("pass", {"first": first})
    assert sandbox.execute("print(len(first))", {"second": "two"}) == "10000"
    before = sandbox.bytes_sent
    sandbox.execute("pass", {"first": first})  # forgotten by the cache, so sent again
    assert sandbox.bytes_sent - before > 10_000


def test_one_execution_at_a_time(sandbox: LocalSandbox, observer: RecordingObserver) -> None:
    runner = threading.Thread(
        target=sandbox.execute, args=("print('running', flush=True); import time; time.sleep(0.5)",)
    )
    runner.start()
    assert observer.first_output.wait(5)
    with pytest.raises(CodeInterpreterError, match="already has an active execution"):
        sandbox.execute("pass")
    runner.join()


def test_a_failing_observer_does_not_stall_the_sandbox(workspace: Path) -> None:
    class Broken:
        def output(self, stream: str, text: str) -> None:
            raise RuntimeError("observer down")

        def tool_started(self, call_id: str, name: str, arguments: str) -> None:
            raise RuntimeError("observer down")

        def tool_finished(self, call_id: str, name: str, duration: float, error: str | None) -> None:
            raise RuntimeError("observer down")

        def warning(self, message: str) -> None:
            raise RuntimeError("observer down")

    sandbox = LocalSandboxBackend().create(SandboxSpec(workspace, limits=TEST_LIMITS, observer=Broken()))
    try:
        sandbox.tools["echo"] = lambda text: text
        assert sandbox.execute("print(echo('still works'))") == "still works"
    finally:
        sandbox.shutdown()


def test_oversized_reply_is_refused(sandbox: LocalSandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(replies, "MAX_REPLY_BYTES", 10_000)
    sandbox.execute("pass")
    with pytest.raises(CodeInterpreterError, match="a reply longer than 10000 bytes"):
        sandbox.execute("SUBMIT('x' * 20_000)")


def test_shutdown_during_an_execution_ends_it(sandbox: LocalSandbox, observer: RecordingObserver) -> None:
    errors: list[BaseException] = []

    def run() -> None:
        try:
            sandbox.execute("print('going', flush=True)\nimport time\ntime.sleep(30)")
        except BaseException as exc:
            errors.append(exc)

    runner = threading.Thread(target=run)
    runner.start()
    assert observer.wait_for_text("going")
    sandbox.shutdown()
    runner.join(timeout=5)
    assert isinstance(errors[0], CodeInterpreterError) and "shut down" in str(errors[0])


def test_a_sandbox_outlives_the_thread_that_started_it(sandbox: LocalSandbox) -> None:
    # bubblewrap's --die-with-parent follows the thread that launched it: Fleet launches from one that lasts.
    starter = threading.Thread(target=lambda: sandbox.execute("kept = 'state'"))
    starter.start()
    starter.join(30)
    time.sleep(0.2)
    assert sandbox.execute("print(kept)") == "state"
