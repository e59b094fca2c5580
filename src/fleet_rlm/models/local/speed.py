"""How fast the model read and wrote, from the timings llama.cpp logs after each completion."""

from __future__ import annotations

import re
from dataclasses import dataclass

_PROMPT = re.compile(r"prompt eval time =\s*([\d.]+) ms /\s*(\d+) tokens")
_OUTPUT = re.compile(r":\s+eval time =\s*([\d.]+) ms /\s*(\d+) runs")


@dataclass(frozen=True)
class Speed:
    """Totals over completions: tokens read (prompt tokens not already cached) and written, and their times."""

    calls: int = 0
    prompt_tokens: int = 0
    prompt_seconds: float = 0.0
    output_tokens: int = 0
    output_seconds: float = 0.0

    @property
    def read_per_second(self) -> float:
        return self.prompt_tokens / self.prompt_seconds if self.prompt_seconds else 0.0

    @property
    def written_per_second(self) -> float:
        return self.output_tokens / self.output_seconds if self.output_seconds else 0.0

    def seconds_for(self, read: int, written: int) -> float:
        """How long a model call that reads ``read`` new tokens and writes ``written`` takes at this pace."""
        if not self.read_per_second or not self.written_per_second:
            raise ValueError("no completion was measured: the pace is unknown")
        return read / self.read_per_second + written / self.written_per_second

    def describe(self) -> str:
        return (
            f"{self.calls} model calls, read {self.prompt_tokens} tokens at {self.read_per_second:.1f}/s, "
            f"wrote {self.output_tokens} at {self.written_per_second:.1f}/s"
        )


def parse_speed(log: str) -> Speed:
    calls = prompt_tokens = output_tokens = 0
    prompt_ms = output_ms = 0.0
    for line in log.splitlines():
        if match := _PROMPT.search(line):
            calls += 1
            prompt_ms += float(match.group(1))
            prompt_tokens += int(match.group(2))
        elif match := _OUTPUT.search(line):
            output_ms += float(match.group(1))
            output_tokens += int(match.group(2))
    return Speed(calls, prompt_tokens, prompt_ms / 1000, output_tokens, output_ms / 1000)
