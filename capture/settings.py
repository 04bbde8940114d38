"""What a model capture is asked to do, as one plain dataclass (no torch needed)."""

from __future__ import annotations

from dataclasses import dataclass, replace

from .errors import CaptureError
from .presets import DEFAULT_PRESET

ATTN_IMPLEMENTATIONS = ("eager", "sdpa", "flash_attention_2", "flash_attention_3", "flex_attention")
DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
DEVICES = ("auto", "cuda", "cpu")
MODES = ("generate", "forward")
SCENARIOS = ("attention-variants",)
SCENARIO_VARIANTS = ("eager", "eager-inplace", "sdpa-math", "sdpa-efficient", "sdpa-flash", "sdpa-cudnn")


@dataclass(frozen=True)
class CaptureSettings:
    """Options of one model capture; `dtype=None` means bf16 on cuda, fp32 on cpu."""

    model: str = DEFAULT_PRESET
    attn: str = "sdpa"
    dtype: str | None = None
    device: str = "auto"
    mode: str = "generate"
    batch: int = 1
    prompt_len: int = 128
    new_tokens: int = 16
    seed: int = 0
    warmup: int = 1
    repeats: int = 3
    threads: int | None = None
    record_shapes: bool = True
    with_stack: bool = False
    with_modules: bool = False
    profile_memory: bool = False

    def __post_init__(self) -> None:
        check_choice("attention implementation", self.attn, ATTN_IMPLEMENTATIONS)
        check_choice("device", self.device, DEVICES)
        check_choice("mode", self.mode, MODES)
        if self.dtype is not None:
            check_choice("dtype", self.dtype, tuple(DTYPES))
        for name in ("batch", "prompt_len", "new_tokens", "repeats"):
            if getattr(self, name) < 1:
                raise CaptureError(f"{name.replace('_', '-')} must be at least 1")
        if self.threads is not None and self.threads < 1:
            raise CaptureError("threads must be at least 1")
        if self.warmup < 0:
            raise CaptureError("warmup must be 0 or more")

    def with_attn(self, attn: str) -> CaptureSettings:
        """Return a copy that asks for attention implementation `attn`."""
        return replace(self, attn=attn)


def check_choice(what: str, value: str, choices: tuple[str, ...]) -> None:
    """Raise `CaptureError` unless `value` is one of `choices`."""
    if value not in choices:
        raise CaptureError(f"unknown {what} {value!r} (choose from: {', '.join(choices)})")


def parse_variants(text: str, choices: tuple[str, ...], what: str) -> list[str]:
    """Split a comma-separated variant list, checking every name and dropping repeats."""
    names = [name.strip() for name in text.split(",") if name.strip()]
    if not names:
        raise CaptureError(f"--variants names no {what}")
    for name in names:
        check_choice(what, name, choices)
    return list(dict.fromkeys(names))
