"""Secret-looking metadata values are replaced before anything is rendered.

A value is redacted when its key looks like a credential (token, secret, password, key,
auth, cookie, session, credential, private, signature — as a word in the key, so
`TOKENIZERS_PARALLELISM` stays) or when the value itself looks like one (Hugging Face
`hf_…`, GitHub `ghp_…`/`github_pat_…`, OpenAI-style `sk-…`, AWS `AKIA…`, Slack `xox…-`,
JWTs `eyJ….….…`, PEM private keys, and `user:password@` inside URLs).
Rules are documented in docs/report.md; `--no-redact` turns them off.
"""

from __future__ import annotations

import re
from typing import Any

REDACTED = "[redacted]"

_KEY_WORDS = r"token|secret|passw(?:or)?d|passwd|pwd|api[_-]?key|access[_-]?key|private[_-]?key|auth|cookie|session|credential|signature|key"
SECRET_KEY = re.compile(rf"(?:^|[^a-z0-9])(?:{_KEY_WORDS})(?:$|[^a-z0-9])", re.IGNORECASE)
SECRET_VALUE = re.compile(
    r"hf_[A-Za-z0-9]{20,}"
    r"|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}"
    r"|sk-[A-Za-z0-9_\-]{16,}"
    r"|(?:AKIA|ASIA)[A-Z0-9]{16}"
    r"|xox[abposr]-[A-Za-z0-9-]{10,}"
    r"|eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]{8,}"
    r"|-----BEGIN [A-Z ]*PRIVATE KEY-----"
)
URL_PASSWORD = re.compile(r"(?P<scheme>[a-z][a-z0-9+.-]*://)(?P<user>[^:/@\s]+):(?P<pw>[^@/\s]+)@", re.IGNORECASE)
# keys that name what a value is *for* without being secret themselves
SAFE_KEYS = re.compile(r"(?:^|_)(?:num|max|min)_?tokens?$|tokenizers?_|token_?(?:count|len|length|ids?)$|_key_?(?:count|len)$", re.IGNORECASE)


def is_secret_key(key: str) -> bool:
    return bool(SECRET_KEY.search(key)) and not SAFE_KEYS.search(key)


def redact_text(text: str) -> str:
    """Secret-looking substrings of a free-form value replaced."""
    text = SECRET_VALUE.sub(REDACTED, text)
    return URL_PASSWORD.sub(lambda m: f"{m['scheme']}{m['user']}:{REDACTED}@", text)


def redact(value: Any, key: str = "") -> Any:
    """A deep copy of a JSON-like value with secret-looking parts replaced."""
    if isinstance(value, dict):
        return {k: (REDACTED if is_secret_key(str(k)) and _has_content(v) else redact(v, str(k)))
                for k, v in value.items()}
    if isinstance(value, list):
        return [redact(v, key) for v in value]
    if isinstance(value, str):
        if "=" in value and is_secret_key(value.split("=", 1)[0].strip()):
            return value.split("=", 1)[0] + "=" + REDACTED  # "HF_TOKEN=..." inside lists
        return redact_text(value)
    return value


def _has_content(v: Any) -> bool:
    return v not in (None, "", [], {})


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
