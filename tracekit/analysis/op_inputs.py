"""One op call's recorded inputs (`Input Dims`, `Input type`, `Concrete Inputs`) read
position by position (`Args`), the element sizes and labels of their types, and the
`Work` a formula (`work_formulas`) makes of them."""

from __future__ import annotations

import math
from typing import Any, NamedTuple

DTYPE_BYTES: dict[str, int] = {
    "c10::BFloat16": 2, "c10::Half": 2, "float": 4, "double": 8, "long int": 8, "int": 4,
    "short int": 2, "signed char": 1, "unsigned char": 1, "bool": 1,
    "c10::Float8_e4m3fn": 1, "c10::Float8_e5m2": 1, "c10::Float8_e4m3fnuz": 1,
    "c10::Float8_e5m2fnuz": 1, "c10::Float8_e8m0fnu": 1, "c10::Float4_e2m1fn_x2": 1,
    "c10::qint8": 1, "c10::quint8": 1, "c10::qint32": 4, "unsigned short": 2,
    "unsigned int": 4, "unsigned long": 8, "c10::complex<c10::Half>": 4,
    "c10::complex<float>": 8, "c10::complex<double>": 16,
}
DTYPE_LABEL: dict[str, str] = {
    "c10::BFloat16": "bf16", "c10::Half": "fp16", "float": "fp32", "double": "fp64",
    "c10::Float8_e4m3fn": "fp8", "c10::Float8_e5m2": "fp8", "c10::Float8_e4m3fnuz": "fp8",
    "c10::Float8_e5m2fnuz": "fp8", "signed char": "int8", "c10::qint8": "int8",
    "unsigned char": "int8", "c10::quint8": "int8", "c10::Float4_e2m1fn_x2": "fp4",
}
# c10::ScalarType codes as Concrete Inputs write a `dtype=` argument.
SCALAR_TYPES: dict[str, str] = {
    "0": "unsigned char", "1": "signed char", "2": "short int", "3": "int", "4": "long int",
    "5": "c10::Half", "6": "float", "7": "double", "11": "bool", "15": "c10::BFloat16",
    "23": "c10::Float8_e5m2", "24": "c10::Float8_e4m3fn", "25": "c10::Float8_e5m2fnuz",
    "26": "c10::Float8_e4m3fnuz",
}


class Work(NamedTuple):
    work_class: str
    flops: float | None  # None only with `unknown_reason`
    bytes: float | None
    compute_dtype: str | None = None
    causal: bool | None = None
    unknown_reason: str | None = None


class Args:
    """One op's recorded inputs: `dims`, `types` and `concrete` lists, position by position."""

    def __init__(self, dims: list[Any], types: list[Any], concrete: list[Any]) -> None:
        self.dims, self.types, self.concrete = dims, types, concrete

    def shape(self, i: int) -> list[int] | None:
        d = self.dims[i] if i < len(self.dims) else None
        return d if isinstance(d, list) and all(isinstance(x, int) for x in d) else None

    def type(self, i: int) -> str:
        t = self.types[i] if i < len(self.types) else ""
        return t if isinstance(t, str) else ""

    def is_tensor(self, i: int) -> bool:
        return self.shape(i) is not None and self.type(i) in DTYPE_BYTES

    def numel(self, i: int) -> int | None:
        s = self.shape(i)
        return None if s is None else math.prod(s)

    def width(self, i: int) -> int | None:
        return DTYPE_BYTES.get(self.type(i))

    def nbytes(self, i: int) -> float | None:
        n, w = self.numel(i), self.width(i)
        return None if n is None or w is None else float(n * w)

    def text(self, i: int) -> str:
        c = self.concrete[i] if i < len(self.concrete) else ""
        return c.strip() if isinstance(c, str) else ""

    def tensors(self) -> list[int]:
        return [i for i in range(len(self.dims)) if self.is_tensor(i)]

    def input_bytes(self, *positions: int) -> float | None:
        """Bytes of the given inputs (all tensor inputs when none given); None if one is unknown."""
        idx = positions or tuple(self.tensors())
        sizes = [self.nbytes(i) for i in idx if self.shape(i) is not None]
        return None if any(s is None for s in sizes) else float(sum(sizes))  # type: ignore[arg-type]

    def label(self, i: int) -> str | None:
        return DTYPE_LABEL.get(self.type(i))
