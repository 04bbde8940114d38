"""`record_function` ranges laid over a Hugging Face model through module hooks.

Names written into the trace (as `user_annotation` events on the CPU thread, and as
`gpu_user_annotation` on CUDA):

- `prefill`: the first forward of a `generate` call, and any forward outside `generate`;
- `decode#<i>`: the i-th following forward of that `generate` call, counting from 0;
- `attention#<layer_idx>`: one call of the attention module of layer `layer_idx`.

Inside `generate`, `prefill` and each `decode#<i>` run from the start of their forward to
the start of the next one (or the end of `generate`), so they also hold the sampling and
bookkeeping of that step; the ranges tile the whole call.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Iterator
from typing import Any

from torch import nn
from torch.profiler import record_function

ANNOTATION_NAMES = {
    "prefill": "prefill",
    "decode": "decode#<i> (i counts decode forwards of one generate call from 0)",
    "attention": "attention#<layer_idx>",
}


class StepRanges:
    """Opens `prefill` / `decode#<i>` ranges from the hooks of the top-level model."""

    def __init__(self) -> None:
        self.in_generate = False
        self.step = 0
        self.open_range: record_function | None = None

    def before_forward(self, module: nn.Module, args: Any) -> None:
        """Forward pre-hook: close the previous step's range and open this one's."""
        if self.in_generate:
            self.close()
            name = "prefill" if self.step == 0 else f"decode#{self.step - 1}"
            self.step += 1
        else:
            name = "prefill"
        self.open_range = record_function(name).__enter__()

    def after_forward(self, module: nn.Module, args: Any, output: Any) -> None:
        """Forward hook: outside `generate` a range ends with its forward."""
        if not self.in_generate:
            self.close()

    def close(self) -> None:
        """End the open range, if any."""
        if self.open_range is not None:
            self.open_range.__exit__(None, None, None)
            self.open_range = None

    def wrap_generate(self, generate: Any) -> Any:
        """Wrap a bound `generate` so each call restarts at `prefill`."""

        @functools.wraps(generate)
        def wrapped(*args: Any, **kwargs: Any) -> Any:
            self.in_generate, self.step = True, 0
            try:
                return generate(*args, **kwargs)
            finally:
                self.close()
                self.in_generate = False

        return wrapped


class AttentionRanges:
    """Opens an `attention#<layer_idx>` range around each attention module call."""

    def __init__(self) -> None:
        self.open_ranges: dict[int, list[record_function]] = {}

    def hooks_for(self, name: str) -> tuple[Any, Any]:
        """Return the pre-hook and hook pair for one attention module named `name`."""

        def before(module: nn.Module, args: Any) -> None:
            handle = record_function(name).__enter__()
            self.open_ranges.setdefault(id(module), []).append(handle)

        def after(module: nn.Module, args: Any, output: Any) -> None:
            stack = self.open_ranges.get(id(module))
            if stack:
                stack.pop().__exit__(None, None, None)

        return before, after


def attention_modules(model: nn.Module) -> list[tuple[int, nn.Module]]:
    """Attention modules of `model` with their layer index, outermost ones only.

    A module counts when its class name ends in "Attention"; its `layer_idx` attribute
    gives the index, else its order among the attention modules found.
    """
    found: list[tuple[str, nn.Module]] = []
    for path, module in model.named_modules():
        if not type(module).__name__.endswith("Attention"):
            continue
        if any(path.startswith(outer + ".") for outer, _ in found):
            continue
        found.append((path, module))
    return [(_layer_index(module, order), module) for order, (_, module) in enumerate(found)]


def _layer_index(module: nn.Module, order: int) -> int:
    layer_idx = getattr(module, "layer_idx", None)
    return layer_idx if isinstance(layer_idx, int) else order


@contextlib.contextmanager
def annotate(model: nn.Module, steps: bool = True, attention: bool = True) -> Iterator[int]:
    """Install the step and attention ranges on `model`; yields the number of attention modules.

    The hooks and the `generate` wrapper are removed on exit.
    """
    handles = []
    step_ranges = StepRanges()
    own_generate = vars(model).get("generate")
    modules = attention_modules(model) if attention else []
    try:
        if steps:
            handles.append(model.register_forward_pre_hook(step_ranges.before_forward))
            handles.append(model.register_forward_hook(step_ranges.after_forward, always_call=True))
            if hasattr(model, "generate"):
                model.generate = step_ranges.wrap_generate(model.generate)
        attention_ranges = AttentionRanges()
        for layer_idx, module in modules:
            before, after = attention_ranges.hooks_for(f"attention#{layer_idx}")
            handles.append(module.register_forward_pre_hook(before))
            handles.append(module.register_forward_hook(after, always_call=True))
        yield len(modules)
    finally:
        for handle in handles:
            handle.remove()
        step_ranges.close()
        if own_generate is not None:
            model.generate = own_generate
        elif "generate" in vars(model):
            del model.generate
