"""The dataset of an optimization run, and the rules it must meet.

Rules, each refusing with its own message and code:

- ``min-examples``: at least 8 approved examples (benchmark-labeled ones are excluded first: they
  measure, they never train);
- ``min-groups``: from at least 3 source groups;
- ``split``: split by source group, critical groups go to holdout, and train and dev each get at least
  one group of their own.

Groups never straddle the split, so what is measured on dev and holdout was never seen in training.
When no group is critical, one non-critical group is the holdout; such a run can still search and
report, but its gate cannot pass (no critical holdout case), so the candidate is never approvable.
"""

from __future__ import annotations

from dataclasses import dataclass

from fleet_rlm.store import Invalid, LabelRecord

MIN_EXAMPLES = 8
MIN_GROUPS = 3


class DatasetRefused(Invalid):
    """The labels do not make a dataset; ``rule`` names the rule, the message says what is missing."""

    def __init__(self, rule: str, message: str) -> None:
        super().__init__(f"dataset rule {rule!r}: {message}", code=f"dataset_{rule.replace('-', '_')}")
        self.rule = rule


@dataclass(frozen=True)
class Split:
    train: list[LabelRecord]
    dev: list[LabelRecord]
    holdout: list[LabelRecord]
    benchmark_excluded: int

    def groups(self) -> dict[str, list[str]]:
        return {name: sorted({x.group for x in part}) for name, part in self.parts().items()}

    def parts(self) -> dict[str, list[LabelRecord]]:
        return {"train": self.train, "dev": self.dev, "holdout": self.holdout}


def split_dataset(labels: list[LabelRecord]) -> Split:
    """Apply the rules to ``labels``; raises :class:`DatasetRefused`."""
    usable = [label for label in labels if not label.benchmark]
    excluded = len(labels) - len(usable)
    if len(usable) < MIN_EXAMPLES:
        note = f" ({excluded} benchmark-labeled ones are excluded)" if excluded else ""
        raise DatasetRefused(
            "min-examples",
            f"{len(usable)} approved examples{note}; at least {MIN_EXAMPLES} are needed: label more captured turns",
        )
    groups = sorted({label.group for label in usable})
    if len(groups) < MIN_GROUPS:
        raise DatasetRefused(
            "min-groups",
            f"the examples come from {len(groups)} source group(s) ({', '.join(groups)}); at least {MIN_GROUPS} "
            "are needed: label turns with --group",
        )
    critical = sorted({label.group for label in usable if label.critical})
    rest = [group for group in groups if group not in critical]
    holdout = critical or rest[-1:]
    if not critical:
        rest = rest[:-1]
    if len(rest) < 2:
        raise DatasetRefused(
            "split",
            f"after the critical groups ({', '.join(critical)}) go to holdout, {len(rest)} group(s) remain; "
            "train and dev need at least one each: label turns of more non-critical groups",
        )
    half = (len(rest) + 1) // 2
    train, dev = set(rest[:half]), set(rest[half:])
    return Split(
        train=[x for x in usable if x.group in train],
        dev=[x for x in usable if x.group in dev],
        holdout=[x for x in usable if x.group in holdout],
        benchmark_excluded=excluded,
    )
