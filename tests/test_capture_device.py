"""GPU decisions of the capture, with the device's facts injected (no GPU needed)."""

from __future__ import annotations

from dataclasses import dataclass

import pytest

torch = pytest.importorskip("torch")

from tracekit.capture import CaptureError, CaptureSettings
from tracekit.capture.metadata import base_metadata
from tracekit.capture.runtime import check_attn_available, cuda_sync_config, resolve_dtype
from tracekit.capture.scenarios import fit_shape, peak_bytes, resolve_shape
from tracekit.capture.session import make_profiler

GIB = 2**30
CUDA = torch.device("cuda")


@dataclass
class FakeProps:
    """What `torch.cuda.get_device_properties` returns, the fields the capture reads."""

    name: str
    major: int
    minor: int
    total_memory: int


def test_default_dtype_is_bf16_only_where_the_gpu_has_it() -> None:
    assert resolve_dtype(None, CUDA, bf16_ok=True) == torch.bfloat16  # A100, H100
    assert resolve_dtype(None, CUDA, bf16_ok=False) == torch.float16  # T4, V100
    assert resolve_dtype(None, torch.device("cpu")) == torch.float32
    assert resolve_dtype("fp16", CUDA, bf16_ok=False) == torch.float16
    with pytest.raises(CaptureError, match="no native bf16"):
        resolve_dtype("bf16", CUDA, bf16_ok=False)


def test_flash_attention_3_is_a_choice_checked_against_the_gpu() -> None:
    assert CaptureSettings(attn="flash_attention_3").attn == "flash_attention_3"
    with pytest.raises(CaptureError, match="needs a CUDA GPU"):
        check_attn_available("flash_attention_3", torch.device("cpu"))
    with pytest.raises(CaptureError, match=r"Hopper.*A100 is 8\.0"):
        check_attn_available("flash_attention_3", CUDA, props=FakeProps("A100", 8, 0, 80 * GIB))
    import importlib.util

    if importlib.util.find_spec("flash_attn_interface") is None:
        with pytest.raises(CaptureError, match="flash-attn-3"):
            check_attn_available("flash_attention_3", CUDA, props=FakeProps("H100", 9, 0, 80 * GIB))


def test_peak_bytes_by_hand() -> None:
    # 1 x 32 x 4096 x 64 in bf16: 4 fp32 score copies 32*4096*4096*4*4 = 8 GiB, q/k/v/out 4*32*4096*64*2 = 64 MiB
    assert peak_bytes({"batch": 1, "heads": 32, "seq": 4096, "head_dim": 64}, 2) == 8 * GIB + 64 * 2**20


@pytest.mark.parametrize(
    ("free_gib", "batch", "seq"),
    [
        (79, 4, 4096),  # H100 80 GB: 32.25 GiB <= 39.5 GiB, the full default
        (23, 1, 4096),  # 24 GB card: budget 11.5 GiB; batch 2 needs 16.1, batch 1 8.06
        (15, 1, 2048),  # 16 GB card: budget 7.5 GiB; batch 1 needs 8.06, seq 2048 2.03
    ],
)
def test_gpu_default_shape_is_sized_from_free_memory(free_gib: int, batch: int, seq: int) -> None:
    shape = resolve_shape(CUDA, free_bytes=free_gib * GIB, element_bytes=2)
    assert shape == {"batch": batch, "heads": 32, "seq": seq, "head_dim": 64}


def test_shape_options_given_are_never_shrunk() -> None:
    shape = {"batch": 4, "heads": 32, "seq": 4096, "head_dim": 64}
    assert fit_shape(shape, 15 * GIB, 2, {"batch", "seq"}) == shape
    assert resolve_shape(CUDA, free_bytes=15 * GIB, element_bytes=2, batch=2)["batch"] == 2


def test_gpu_profiler_records_cuda_sync_events() -> None:
    assert "enable_cuda_sync_events" in torch._C._profiler._ExperimentalConfig.__init__.__doc__
    assert cuda_sync_config() is not None
    metadata: dict = {}
    profiler = make_profiler(metadata, CUDA)
    assert profiler.experimental_config is not None
    assert metadata["profiler"]["cuda_sync_events"] is True
    cpu_meta: dict = {}
    assert make_profiler(cpu_meta, torch.device("cpu")).experimental_config is None
    assert cpu_meta["profiler"]["cuda_sync_events"] is False


def test_metadata_records_threads_cpu_count_and_load() -> None:
    import os

    torch.set_num_threads(1)
    host = base_metadata("user", torch.device("cpu"))["host"]
    assert host["threads"] == 1 and host["cpu_count"] == os.cpu_count()
    assert len(host["loadavg"]) == 3
