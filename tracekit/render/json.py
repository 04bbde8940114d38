"""Report model -> JSON (the same fields as the model; docs/report.md describes them)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any


def to_data(report: Any) -> Any:
    return dataclasses.asdict(report)


def render_json(report: Any) -> str:
    return json.dumps(to_data(report), indent=2, ensure_ascii=False, allow_nan=False) + "\n"
