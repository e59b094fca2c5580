"""The committed OpenAPI document: ``uv run python -m fleet_rlm.api.openapi`` rewrites docs/openapi.json."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from fleet_rlm.api.app import create_app
from fleet_rlm.config import Settings

DOCUMENT = Path(__file__).resolve().parents[3] / "docs" / "openapi.json"


def openapi_document() -> dict[str, Any]:
    """The API's OpenAPI document; independent of local configuration."""
    return create_app(Settings.model_validate({})).openapi()


def render() -> str:
    return json.dumps(openapi_document(), indent=2, sort_keys=True) + "\n"


def main(argv: list[str] | None = None) -> int:
    target = Path(argv[0]) if argv else DOCUMENT
    target.write_text(render(), encoding="utf-8")
    print(f"wrote {target}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
