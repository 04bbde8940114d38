"""The rule registry and the thresholds configuration.

A rule is a function `(ctx: Context, p: Params) -> Hit | list[Hit] | None` registered with

    @rule(id="gpu_gaps", severity="medium", nothing_found="No GPU gap over {min_gap}.",
          advice="...", min_gap_ns=1_000_000)
    def gpu_gaps(ctx, p): ...

Keyword arguments beyond the fixed ones are the rule's thresholds and their defaults
(units in the names). `nothing_found` may name each threshold (`{min_gap_ns}`: 1000000),
and a nanosecond threshold also without its `_ns`, as a time in words (`{min_gap}`: 1 ms). Every rule also has `enabled` (default True). A `Config` overrides
thresholds from a Python dict (`{"gpu_gaps.min_gap_ns": 5e6}` or
`{"gpu_gaps": {"min_gap_ns": 5e6}}`) or from `rule.param=value` strings (the CLI's
`--set`); values are converted to the default's type; unknown rules or thresholds are an
error. Environment variables are never read.

Other modules add rules by defining them in `tracekit/findings/rules/<name>.py` (every
module there is imported by the package) or anywhere else that is imported before
`run_findings` runs.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from tracekit import format as fmt
from tracekit.errors import UsageError
from tracekit.findings.model import LOSSES, SEVERITIES, Evidence


@dataclass(frozen=True)
class Hit:
    """What a rule returns per problem; the engine adds rule id, severity, share, thresholds."""

    title: str
    time_lost_ns: int
    evidence: tuple[Evidence, ...] = ()
    advice: str | None = None  # defaults to the rule's advice
    severity: str | None = None  # lowers (never raises) the band its cost earns (`engine.band`)


class Params(dict):
    """A rule's thresholds: a dict with attribute access (`p.min_gap_ns`)."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


@dataclass(frozen=True)
class RuleSpec:
    id: str
    severity: str  # the most its findings can be: their cost sets the band (`engine.band`) up to it
    title: str  # what the rule detects, one line (docs, CLI listing)
    advice: str
    nothing_found: str  # may use {threshold} placeholders; `{x}` for a threshold `x_ns` reads as a time
    defaults: dict[str, Any]
    func: Callable[..., Any] = field(repr=False, compare=False)
    superseded_by: str | None = None  # skipped when this rule runs in the same pass
    loses: str = "window"  # LOSSES: what its time lost is part of (`findings.recoverable`)

    def clean_text(self, params: Mapping[str, Any]) -> str:
        times = {k.removesuffix("_ns"): fmt.ns(v) for k, v in params.items()
                 if k.endswith("_ns") and isinstance(v, (int, float)) and not isinstance(v, bool)}
        try:
            return self.nothing_found.format(**{**times, **params})  # (a threshold's own name wins)
        except (KeyError, IndexError, ValueError):
            return self.nothing_found


RULES: dict[str, RuleSpec] = {}


def rule(*, id: str, severity: str, title: str, advice: str, nothing_found: str, superseded_by: str | None = None,
         loses: str = "window", **defaults: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register a rule function under `id` (see the module docstring).

    `superseded_by`: the id of a more specific rule for the same problem; when that rule is
    registered, enabled and run in the same pass, this one is skipped (no double report).
    `loses`: what the time its findings lose is part of (`model.LOSSES`): `gpu_work` (GPU
    busy time), `gpu_idle` (GPU idle time), or `window` (wall time, which may overlap either).
    """
    if severity not in SEVERITIES:
        raise ValueError(f"rule {id}: severity must be one of {SEVERITIES}")
    if loses not in LOSSES:
        raise ValueError(f"rule {id}: loses must be one of {LOSSES}")

    def wrap(func: Callable[..., Any]) -> Callable[..., Any]:
        if id in RULES and RULES[id].func is not func:
            raise ValueError(f"rule id {id!r} is already registered")
        RULES[id] = RuleSpec(id=id, severity=severity, title=title, advice=advice, nothing_found=nothing_found,
                             defaults={"enabled": True, **defaults}, func=func, superseded_by=superseded_by,
                             loses=loses)
        return func

    return wrap


class Config:
    """Threshold overrides, validated against the registry."""

    def __init__(self, overrides: Mapping[str, Any] | None = None) -> None:
        self._values: dict[str, dict[str, Any]] = {}
        for key, value in (overrides or {}).items():
            if isinstance(value, Mapping):
                for param, v in value.items():
                    self._set(key, param, v)
            else:
                rule_id, _, param = key.partition(".")
                self._set(rule_id, param, value)

    @classmethod
    def from_strings(cls, items: Iterable[str]) -> Config:
        """From `rule.param=value` strings (JSON values; bare words are strings)."""
        parsed: dict[str, Any] = {}
        for item in items:
            key, sep, text = item.partition("=")
            if not sep or "." not in key:
                raise UsageError(f"--set expects rule.param=value, got {item!r}")
            parsed[key.strip()] = _parse_value(text.strip())
        return cls(parsed)

    def overrides(self) -> dict[str, dict[str, Any]]:
        """The validated overrides, by rule (what `Config(...)` takes back, and what
        `AnalysisOptions.findings_config` holds)."""
        return {rule_id: dict(values) for rule_id, values in self._values.items()}

    def params(self, rule_id: str) -> Params:
        spec = RULES[rule_id]
        return Params({**spec.defaults, **self._values.get(rule_id, {})})

    def enabled(self, rule_id: str) -> bool:
        return bool(self.params(rule_id)["enabled"])

    def to_dict(self) -> dict[str, dict[str, Any]]:
        return {k: dict(v) for k, v in self._values.items()}

    def _set(self, rule_id: str, param: str, value: Any) -> None:
        spec = RULES.get(rule_id)
        if spec is None:
            raise UsageError(f"unknown rule {rule_id!r} (rules: {', '.join(sorted(RULES))})")
        if param not in spec.defaults:
            raise UsageError(f"rule {rule_id!r} has no threshold {param!r} "
                             f"(thresholds: {', '.join(sorted(spec.defaults))})")
        self._values.setdefault(rule_id, {})[param] = _coerce(value, spec.defaults[param], f"{rule_id}.{param}")


def _parse_value(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return text


def _coerce(value: Any, default: Any, key: str) -> Any:
    try:
        if isinstance(default, bool):
            if isinstance(value, str):
                if value.lower() not in ("true", "false", "1", "0", "yes", "no", "on", "off"):
                    raise ValueError(value)
                return value.lower() in ("true", "1", "yes", "on")
            return bool(value)
        if isinstance(default, (int, float)):  # every threshold is a size, a time or a share: >= 0
            number = float(value)
            if not math.isfinite(number) or number < 0:
                raise UsageError(f"{key}: {value!r} is not a number >= 0")
            if isinstance(default, int):
                if number != int(number):
                    raise ValueError(value)
                return int(number)
            return number
        if isinstance(default, (list, tuple)):
            return type(default)(value if isinstance(value, (list, tuple)) else str(value).split(","))
        return str(value)
    except (TypeError, ValueError):
        raise UsageError(f"{key}: {value!r} is not a valid {type(default).__name__}") from None
