"""Reading an answer's numbers: thousands separators, decimals and signs, as a person writes them."""

from __future__ import annotations

from fleet_rlm.engine.numbers import numbers_in, written


def test_numbers_are_read_in_order_with_separators_decimals_and_signs() -> None:
    assert numbers_in("Total **29,342** (mean 97.15, change -3; items 1,2)") == [29342.0, 97.15, -3.0, 1.0, 2.0]
    assert numbers_in("no figures here") == []


def test_a_number_is_written_back_as_a_person_writes_it() -> None:
    assert [written(v) for v in (29342.0, 97.15, 1234567890.0)] == ["29342", "97.15", "1234567890"]
