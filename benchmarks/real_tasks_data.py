"""The tasks of ``real_tasks.py``: small jobs with known answers, on data generated from a fixed seed.

Each task writes its input files (workspace paths under ``files/``) and checks an answer, and a task
that asks for a file to be saved may be met by that file instead (``artifact``). The checks are lenient
about form (any number in the answer may be the one asked for, thousands separators are read) and
strict about value.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable
from dataclasses import dataclass

from fleet_rlm.engine.numbers import numbers_in

SEED = 20261203
INLINE_LIMIT = 6_000
"""Files up to this many characters in total are shown to the direct route inside its task text."""


def has_number(text: str, expected: float, tolerance: float = 0.01) -> bool:
    return any(abs(value - expected) <= max(tolerance, abs(expected) * 1e-4) for value in numbers_in(text))


@dataclass(frozen=True)
class Task:
    name: str
    kind: str
    text: str
    files: dict[str, str]
    check: Callable[[str], bool]
    expected: str
    """The right answer, as a person would read it (for the report)."""
    artifact: str | None = None
    """The path (under the run's directory, e.g. ``artifacts/x.csv``) of a file the task asks to be saved."""
    check_artifact: Callable[[str], bool] | None = None
    """Whether the saved file's text holds the right answer."""

    def passes(self, answer: str, artifact_text: str | None = None) -> bool:
        """The answer is right, or the file the task asked for was saved with the right content."""
        if self.check(answer):
            return True
        return self.check_artifact is not None and artifact_text is not None and self.check_artifact(artifact_text)

    @property
    def size(self) -> int:
        return sum(len(body) for body in self.files.values())

    def inline_text(self) -> str | None:
        """The task with its files' contents written in, for the direct route; None if they are too large."""
        if self.size > INLINE_LIMIT:
            return None
        if not self.files:
            return self.text
        shown = "\n\n".join(f"Contents of {path}:\n```\n{body}```" for path, body in self.files.items())
        return f"{self.text}\n\n{shown}"


def _rng(name: str) -> random.Random:
    return random.Random(f"{SEED}-{name}")


REGIONS = ("north", "south", "east", "west")


def csv_total() -> Task:
    rng = _rng("csv_total")
    rows = [(rng.choice(REGIONS), rng.randint(10, 990)) for _ in range(60)]
    body = "region,revenue\n" + "".join(f"{region},{value}\n" for region, value in rows)
    total = sum(value for _, value in rows)
    return Task(
        "csv_total",
        "csv aggregation",
        "What is the total of the revenue column in files/sales.csv? Answer with the number.",
        {"files/sales.csv": body},
        lambda answer: has_number(answer, total),
        str(total),
    )


def csv_top_region() -> Task:
    rng = _rng("csv_top_region")
    rows = [(rng.choice(REGIONS), rng.randint(10, 990)) for _ in range(300)]
    body = "order_id,region,revenue\n" + "".join(f"{i},{region},{value}\n" for i, (region, value) in enumerate(rows))
    totals = {region: sum(v for r, v in rows if r == region) for region in REGIONS}
    best = max(totals, key=lambda region: totals[region])
    return Task(
        "csv_top_region",
        "csv aggregation",
        "In files/orders.csv, which region has the highest total revenue, and what is that total? "
        "Answer with the region and the number.",
        {"files/orders.csv": body},
        lambda answer: best in answer.lower() and has_number(answer, totals[best]),
        f"{best} {totals[best]}",
    )


CITIES = ("lisbon", "oslo", "lima", "osaka", "nairobi", "denver")


def city_top() -> Task:
    rng = _rng("city_top")
    rows = [(rng.choice(CITIES), rng.randint(5, 900)) for _ in range(400)]
    body = "order_id,city,amount\n" + "".join(f"{i},{city},{amount}\n" for i, (city, amount) in enumerate(rows, 1))
    totals = {city: sum(a for c, a in rows if c == city) for city in CITIES}
    best = max(totals, key=lambda city: totals[city])
    return Task(
        "city_top",
        "csv aggregation",
        "files/orders.csv lists orders with a city and an amount. Which city has the highest total order "
        "amount, and what is that total? Answer with the city and the number.",
        {"files/orders.csv": body},
        lambda answer: best in answer.lower() and has_number(answer, totals[best]),
        f"{best} {totals[best]}",
    )


def _totals_by_line(text: str, totals: dict[str, int]) -> bool:
    """Every name is on a line of ``text`` that also holds its total (a CSV row, or a line of an answer)."""
    lines = text.lower().splitlines()
    return all(any(name in line and has_number(line, total) for line in lines) for name, total in totals.items())


def revenue_artifact() -> Task:
    """The README's main job, on data shaped like examples/sales.csv."""
    rng = _rng("revenue_artifact")
    rows = []
    for day in range(1, 13):
        for region in REGIONS:
            for product in ("widget", "gadget"):
                units = rng.randint(1, 40)
                rows.append((f"2026-07-{day:02d}", region, product, units, units * (12 if product == "widget" else 19)))
    body = "date,region,product,units,revenue\n" + "".join(",".join(map(str, row)) + "\n" for row in rows)
    totals = {region: sum(row[4] for row in rows if row[1] == region) for region in REGIONS}

    def check(answer: str) -> bool:
        return all(name in answer.lower() for name in totals) and all(has_number(answer, t) for t in totals.values())

    return Task(
        "revenue_artifact",
        "csv aggregation and an artifact",
        "Calculate revenue by region from files/sales.csv and save artifacts/revenue_by_region.csv "
        "(columns region, revenue). Answer with each region's revenue.",
        {"files/sales.csv": body},
        check,
        ", ".join(f"{region} {total}" for region, total in totals.items()),
        artifact="artifacts/revenue_by_region.csv",
        check_artifact=lambda text: _totals_by_line(text, totals),
    )


def csv_mean_filtered() -> Task:
    rng = _rng("csv_mean_filtered")
    categories = ("tools", "garden", "kitchen")
    rows = [(f"item{i}", rng.choice(categories), round(rng.uniform(2, 200), 2)) for i in range(500)]
    body = "sku,category,price\n" + "".join(f"{sku},{cat},{price:.2f}\n" for sku, cat, price in rows)
    garden = [price for _, cat, price in rows if cat == "garden"]
    mean = round(sum(garden) / len(garden), 2)
    return Task(
        "csv_mean_filtered",
        "csv aggregation",
        "What is the average price of the items in the garden category in files/products.csv? "
        "Answer with the number, rounded to 2 decimals.",
        {"files/products.csv": body},
        lambda answer: has_number(answer, mean, tolerance=0.011),
        f"{mean:.2f}",
    )


def _customers_and_orders(name: str) -> tuple[list[tuple[int, str, str]], list[tuple[int, int, int]]]:
    rng = _rng(name)
    countries = ("Norway", "Chile", "Japan", "Kenya", "Canada")
    customers = [(cid, rng.choice(countries), rng.choice(("gold", "silver", "basic"))) for cid in range(1, 41)]
    orders = [(oid, rng.randint(1, 40), rng.randint(5, 500)) for oid in range(1, 201)]
    return customers, orders


def _join_files(customers: list[tuple[int, str, str]], orders: list[tuple[int, int, int]]) -> dict[str, str]:
    return {
        "files/customers.csv": "customer_id,country,tier\n"
        + "".join(f"{cid},{country},{tier}\n" for cid, country, tier in customers),
        "files/orders.csv": "order_id,customer_id,amount\n"
        + "".join(f"{oid},{cid},{amount}\n" for oid, cid, amount in orders),
    }


def join_total() -> Task:
    customers, orders = _customers_and_orders("join_total")
    norway = {cid for cid, country, _ in customers if country == "Norway"}
    total = sum(amount for _, cid, amount in orders if cid in norway)
    return Task(
        "join_total",
        "join",
        "files/orders.csv lists orders by customer_id; files/customers.csv gives each customer's country. "
        "What is the total order amount of the customers in Norway? Answer with the number.",
        _join_files(customers, orders),
        lambda answer: has_number(answer, total),
        str(total),
    )


def join_count() -> Task:
    customers, orders = _customers_and_orders("join_count")
    gold = {cid for cid, _, tier in customers if tier == "gold"}
    count = sum(1 for _, cid, _ in orders if cid in gold)
    return Task(
        "join_count",
        "join",
        "files/orders.csv lists orders by customer_id; files/customers.csv gives each customer's tier. "
        "How many orders were placed by gold-tier customers? Answer with the number.",
        _join_files(customers, orders),
        lambda answer: has_number(answer, count, tolerance=0),
        str(count),
    )


WORDS = [
    "the",
    "quarterly",
    "report",
    "notes",
    "steady",
    "demand",
    "across",
    "warehouses",
    "while",
    "shipping",
    "delays",
    "eased",
    "and",
    "suppliers",
    "confirmed",
    "new",
    "contracts",
    "for",
    "packaging",
    "materials",
    "before",
    "the",
    "holiday",
    "season",
    "began",
]


def _filler(rng: random.Random, size: int) -> list[str]:
    lines: list[str] = []
    length = 0
    while length < size:
        line = " ".join(rng.choice(WORDS) for _ in range(rng.randint(8, 16))) + "\n"
        lines.append(line)
        length += len(line)
    return lines


def needle() -> Task:
    rng = _rng("needle")
    code = f"QX-{rng.randint(1000, 9999)}-ZEBRA"
    lines = _filler(rng, 2_000_000)
    lines.insert(rng.randint(len(lines) // 3, 2 * len(lines) // 3), f"note: the vault access code is {code}\n")
    return Task(
        "needle",
        "needle in 2 MB",
        "files/archive.txt is a long text. Somewhere in it a line gives the vault access code. "
        "What is the vault access code? Answer with the code.",
        {"files/archive.txt": "".join(lines)},
        lambda answer: code in answer,
        code,
    )


def needle_count() -> Task:
    rng = _rng("needle_count")
    lines = _filler(rng, 2_000_000)
    places = sorted(rng.sample(range(len(lines)), 17))
    for offset, place in enumerate(places):
        lines.insert(place + offset, f"ALERT sensor {rng.randint(1, 99)} reported overheating\n")
    return Task(
        "needle_count",
        "needle in 2 MB",
        "files/log.txt is a long log. How many of its lines start with ALERT? Answer with the number.",
        {"files/log.txt": "".join(lines)},
        lambda answer: has_number(answer, len(places), tolerance=0),
        str(len(places)),
    )


SERVICES = ("auth", "payments", "search", "billing", "mailer")
LEVELS = ("DEBUG", "INFO", "INFO", "INFO", "WARN", "ERROR")
LOG_LINES = 30_000


def log_count() -> Task:
    rng = _rng("log_count")
    lines = []
    for i in range(LOG_LINES):
        stamp = f"2026-11-{1 + i * 30 // LOG_LINES:02d}T{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d}"
        level, service = rng.choice(LEVELS), rng.choice(SERVICES)
        lines.append(f"{stamp} {level} {service} request {rng.randint(1000, 99999)} took {rng.randint(1, 900)}ms\n")
    count = sum(1 for line in lines if line.split()[1:3] == ["ERROR", "payments"])
    return Task(
        "log_count",
        "count over a 30,000-line log",
        "files/service.log is a log, one event per line: timestamp, level, service, message. How many lines "
        "have level ERROR and service payments? Answer with the number.",
        {"files/service.log": "".join(lines)},
        lambda answer: has_number(answer, count, tolerance=0),
        str(count),
    )


POSITIVE = (
    "Arrived early and works perfectly, very happy with it.",
    "Great quality, I would buy this again.",
    "Excellent service and a fantastic product.",
    "Love it, exactly what I wanted.",
    "Sturdy, well made and easy to set up. Recommended.",
    "Wonderful! My kids use it every day.",
)
NEGATIVE = (
    "Broke after two days, a waste of money.",
    "Terrible quality, the parts did not fit.",
    "Arrived damaged and support never answered.",
    "Awful, it stopped working within a week.",
    "Very disappointed, nothing like the photos.",
    "Cheap plastic that cracked on first use. Do not buy.",
)
CLASSIFY_THRESHOLD = 0.8


def classify() -> Task:
    rng = _rng("classify")
    reviews = [(text, True) for text in POSITIVE] + [(text, False) for text in NEGATIVE]
    rng.shuffle(reviews)
    body = "".join(json.dumps({"id": i + 1, "text": text}) + "\n" for i, (text, _) in enumerate(reviews))
    labels = {i + 1: positive for i, (_, positive) in enumerate(reviews)}
    wanted = sorted(i for i, positive in labels.items() if positive)

    def check(answer: str) -> bool:
        said = {int(value) for value in numbers_in(answer) if value.is_integer() and int(value) in labels}
        right = sum(1 for i, positive in labels.items() if (i in said) == positive)
        return right / len(labels) >= CLASSIFY_THRESHOLD

    return Task(
        "classify",
        "classification",
        "files/reviews.jsonl holds product reviews, one JSON object per line with an id and a text. Classify "
        "each review as positive or negative with llm_query_batched (one prompt per review). "
        "Answer with the ids of the positive reviews, and nothing else.",
        {"files/reviews.jsonl": body},
        check,
        " ".join(map(str, wanted)),
    )


def child_agents() -> Task:
    rng = _rng("child_agents")
    files: dict[str, str] = {}
    totals: dict[str, int] = {}
    for region in REGIONS[:3]:
        values = [rng.randint(10, 990) for _ in range(80)]
        files[f"files/{region}.csv"] = "day,revenue\n" + "".join(f"{d},{v}\n" for d, v in enumerate(values, 1))
        totals[region] = sum(values)
    best = max(totals, key=lambda region: totals[region])
    return Task(
        "child_agents",
        "child agents",
        "files/north.csv, files/south.csv and files/east.csv each hold one region's daily revenue. Hand each "
        "file to its own child agent that totals its revenue column, then say which region has the largest "
        "total and what it is. Answer with the region and the number.",
        files,
        lambda answer: best in answer.lower() and has_number(answer, totals[best]),
        f"{best} {totals[best]}",
    )


def word_problem() -> Task:
    stock, per_day, days, delivered = 1250, 37, 14, 300
    left = stock - per_day * days + delivered
    return Task(
        "word_problem",
        "no files",
        f"A warehouse holds {stock} units. It ships {per_day} units a day for {days} days, and one delivery of "
        f"{delivered} units arrives during that time. How many units does it hold at the end? Answer with the number.",
        {},
        lambda answer: has_number(answer, left, tolerance=0),
        str(left),
    )


TASKS: dict[str, Callable[[], Task]] = {
    factory.__name__: factory
    for factory in (
        csv_total,
        csv_top_region,
        city_top,
        revenue_artifact,
        csv_mean_filtered,
        join_total,
        join_count,
        needle,
        needle_count,
        log_count,
        classify,
        child_agents,
        word_problem,
    )
}
