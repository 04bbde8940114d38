"""One redaction for every string that leaves tracekit (reports, diffs, JSON, batch tables).

`text(s)` is the rule for free text: credential-shaped substrings become `[redacted]`
(JWTs, `Bearer …`, `Authorization: …`, PEM private-key bodies, URL passwords, GitHub,
Hugging Face, AWS, Google, Stripe, npm, Slack and OpenAI tokens, and `KEY=value` /
`KEY: value` where KEY names a secret in any case style), and control characters that
could corrupt or disguise a report (NUL and the other C0/C1 controls but tab and newline,
and the bidirectional overrides) are removed. `value(key, v)` adds the key rule for
key/value data (metadata). `scrub(obj)` applies `text` to every string of a report model,
dict or list; `clean` only removes the control characters (what `--no-redact` keeps).
Each distinct string is handled once (cached): a report repeats its names many times.
The rules are documented in docs/report.md.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from functools import lru_cache
from typing import Any

REDACTED = "[redacted]"

# words of a key (after camelCase/kebab/dots are split to snake words) that name a secret
SECRET_WORDS = frozenset(
    "token secret secrets password passwords passwd pwd passphrase apikey accesskey privatekey secretkey auth "
    "authorization authentication credential credentials cookie session signature key bearer jwt pat".split())
# keys that name what a value is *for* without being secret themselves (matched on snake words)
SAFE_KEYS = re.compile(r"(?:^|_)(?:num|max|min)_?tokens?$|tokenizers?_|token_?(?:count|len|length|ids?|type)$"
                       r"|_key_?(?:count|len)$")

_CAMEL = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_NOT_WORD = re.compile(r"[^a-z0-9]+")

_B = r"(?<![A-Za-z0-9])"  # a token starts a word
_E = r"(?![A-Za-z0-9])"
_TOKENS = "|".join([
    r"eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}",  # JWT: three base64url parts
    rf"{_B}gh[pousr]_[A-Za-z0-9]{{20,}}{_E}|{_B}github_pat_[A-Za-z0-9_]{{20,}}",  # GitHub
    rf"{_B}hf_[A-Za-z0-9]{{20,}}{_E}",  # Hugging Face
    rf"{_B}(?:AKIA|ASIA)[A-Z0-9]{{16}}{_E}",  # AWS access key id
    rf"{_B}AIza[A-Za-z0-9_-]{{35}}",  # Google API key
    rf"{_B}[spr]k_(?:live|test)_[A-Za-z0-9]{{16,}}",  # Stripe
    rf"{_B}npm_[A-Za-z0-9]{{30,}}{_E}",  # npm
    rf"{_B}xox[abposr]-[A-Za-z0-9-]{{10,}}",  # Slack
    rf"{_B}sk-[A-Za-z0-9_-]{{16,}}",  # OpenAI-style
])
_KEY = r"[A-Za-z][A-Za-z0-9_.-]*"
RULES = re.compile(
    r"(?P<pem>-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----(?:.*?-----END [A-Z0-9 ]*PRIVATE KEY-----|.*))"
    r"|(?P<authz>\b(?i:Proxy-)?(?i:Authorization)['\"]?\s*[:=]\s*['\"]?)(?:(?:Bearer|Basic|Digest|Token|Bot|Negotiate|"
    r"AWS4-HMAC-SHA256)\s+)?[^\s,;'\"]+"
    # scheme://user:password@host: the password runs to the last @ before the host (it may hold @)
    r"|(?P<url>\b[A-Za-z][A-Za-z0-9+.-]*://[^:/@\s]*:)[^/\s]*@(?=[^@/\s]*(?:[/?#\s'\"]|$))"
    r"|(?P<bearer>\b(?i:bearer)\s+)(?=[A-Za-z0-9._~+/-]*[0-9._~+/-])[A-Za-z0-9._~+/-]{8,}=*"
    rf"|(?P<token>{_TOKENS})"
    rf"|(?<![A-Za-z0-9_.-])(?P<key>{_KEY})(?P<sep>['\"]?\s*(?:=|(?<!:):(?!:))\s*)"
    r"(?P<val>'[^']*'|\"[^\"]*\"|[^\s,;&'\"})\]]+)"
    "|(?P<ctl>[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069])",
    re.DOTALL,
)
# every rule above needs one of these: most strings (kernel and op names) are passed by this search alone
MAYBE = re.compile(r"-----BEGIN|(?i:authorization|bearer)|://|eyJ|gh[pousr]_|github_pat_|hf_|AKIA|ASIA|AIza|k_live_"
                   r"|k_test_|npm_|xox|sk-|=|(?<!:):(?!:)"
                   "|[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")
CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def is_secret_key(key: str) -> bool:
    """Whether a key names a secret: `dbPassword`, `aws-secret-access-key`, `HF_TOKEN`, but
    not `TOKENIZERS_PARALLELISM`, `max_tokens` or `author`."""
    snake = _NOT_WORD.sub("_", _CAMEL.sub("_", key).lower()).strip("_")
    return not SAFE_KEYS.search(snake) and any(w in SECRET_WORDS for w in snake.split("_"))


def _replace(m: re.Match[str]) -> str:
    if m["ctl"] is not None:
        return ""
    if m["key"] is not None:
        if is_secret_key(m["key"]):
            return m["key"] + m["sep"] + REDACTED
        return m["key"] + m["sep"] + _sub(m["val"])  # (a URL or token inside a harmless pair)
    for prefix in ("authz", "url", "bearer"):
        if m[prefix] is not None:
            return m[prefix] + REDACTED + ("@" if prefix == "url" else "")
    return REDACTED  # pem, token


def _sub(s: str) -> str:
    return RULES.sub(_replace, s)


@lru_cache(maxsize=1 << 16)
def text(s: str) -> str:
    """`s` with credential-shaped parts replaced and unsafe control characters removed."""
    return _sub(s) if MAYBE.search(s) else s


@lru_cache(maxsize=1 << 16)
def clean(s: str) -> str:
    """`s` with unsafe control characters removed (credentials kept: `--no-redact`)."""
    return CONTROLS.sub("", s)


def value(key: str, v: Any) -> Any:
    """A key/value pair's value, redacted whole when the key names a secret (any case style),
    else with `text` applied to every string inside it."""
    if is_secret_key(str(key)) and v not in (None, "", [], {}):
        return REDACTED
    if isinstance(v, dict):
        return {k: value(str(k), x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [value(key, x) for x in v]
    return text(v) if isinstance(v, str) else v


def redact(v: Any, key: str = "") -> Any:
    """A deep copy of a JSON-like value with secret-looking parts replaced (`value`)."""
    return value(key, v)


def redact_text(s: str) -> str:
    return text(s)


def scrub(obj: Any, secrets: bool = True) -> Any:
    """`obj` (dataclasses, dicts, lists, tuples of strings and numbers) with `text` applied
    to every string, or only `clean` when `secrets` is False; unchanged parts are reused."""
    return _walk(obj, text if secrets else clean)


def _walk(obj: Any, fn: Callable[[str], str]) -> Any:
    if isinstance(obj, str):
        return fn(obj)
    if isinstance(obj, (int, float)) or obj is None:
        return obj
    if isinstance(obj, (list, tuple)):
        out = [_walk(x, fn) for x in obj]
        return obj if all(_same(a, b) for a, b in zip(out, obj)) else type(obj)(out)
    if isinstance(obj, dict):
        items = [(_walk(k, fn), _walk(v, fn)) for k, v in obj.items()]
        return obj if all(_same(k, a) and _same(v, b) for (k, v), (a, b) in zip(items, obj.items())) else dict(items)
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        changes = {}
        for name, old in vars(obj).items():
            new = _walk(old, fn)
            if not _same(new, old):
                changes[name] = new
        return dataclasses.replace(obj, **changes) if changes else obj
    return obj


def _same(a: Any, b: Any) -> bool:
    return a is b or (type(a) is str and a == b)


def flatten(value: Any, prefix: str = "", *, limit: int = 400) -> list[tuple[str, str]]:
    """Nested metadata as (dotted key, text) pairs, at most `limit` of them."""
    out: list[tuple[str, str]] = []

    def walk(v: Any, p: str) -> None:
        if len(out) >= limit:
            return
        if isinstance(v, dict):
            for k, x in v.items():
                walk(x, f"{p}.{k}" if p else str(k))
        elif isinstance(v, list) and v and all(isinstance(x, (dict, list)) for x in v):
            for i, x in enumerate(v):
                walk(x, f"{p}[{i}]")
        else:
            text = v if isinstance(v, str) else repr(v) if not isinstance(v, (int, float, bool, list)) else str(v)
            out.append((p, text if len(text) <= 300 else text[:299] + "…"))

    walk(value, prefix)
    return out
