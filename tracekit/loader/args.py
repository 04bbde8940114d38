"""Typed views of the `args` objects that analyses need, one struct per event family.

Fields are declared `Any` on purpose: a wrong type in one event must not fail the batch;
conversion to the column dtype (with nulls for what does not fit) happens afterwards.
Old Kineto (2021) spells some keys differently (`external id`, `Input dims`); both are read.
"""

from __future__ import annotations

from typing import Any

import msgspec

RAW = msgspec.Raw(b"")


class GpuArgs(msgspec.Struct, gc=False):
    device: Any = None
    stream: Any = None
    correlation: Any = None
    external_id: Any = msgspec.field(default=None, name="External id")
    external_id_old: Any = msgspec.field(default=None, name="external id")
    grid: Any = None
    block: Any = None
    registers: Any = msgspec.field(default=None, name="registers per thread")
    shared_memory: Any = msgspec.field(default=None, name="shared memory")
    blocks_per_sm: Any = msgspec.field(default=None, name="blocks per SM")
    warps_per_sm: Any = msgspec.field(default=None, name="warps per SM")
    occupancy: Any = msgspec.field(default=None, name="est. achieved occupancy %")
    bytes: Any = None
    bandwidth: Any = msgspec.field(default=None, name="memory bandwidth (GB/s)")
    sync_kind: Any = msgspec.field(default=None, name="cuda_sync_kind")


class RuntimeArgs(msgspec.Struct, gc=False):
    correlation: Any = None
    external_id: Any = msgspec.field(default=None, name="External id")
    external_id_old: Any = msgspec.field(default=None, name="external id")
    cbid: Any = None


class OpArgs(msgspec.Struct, gc=False):
    external_id: Any = msgspec.field(default=None, name="External id")
    external_id_old: Any = msgspec.field(default=None, name="external id")
    sequence_nr: Any = msgspec.field(default=None, name="Sequence number")
    fwd_tid: Any = msgspec.field(default=None, name="Fwd thread id")
    python_id: Any = msgspec.field(default=None, name="Python id")
    python_parent_id: Any = msgspec.field(default=None, name="Python parent id")
    input_dims: msgspec.Raw = msgspec.field(default=RAW, name="Input Dims")
    input_dims_old: msgspec.Raw = msgspec.field(default=RAW, name="Input dims")
    input_types: msgspec.Raw = msgspec.field(default=RAW, name="Input type")
    input_strides: msgspec.Raw = msgspec.field(default=RAW, name="Input Strides")
    concrete_inputs: msgspec.Raw = msgspec.field(default=RAW, name="Concrete Inputs")
    flops: Any = None


class MemoryArgs(msgspec.Struct, gc=False):
    device_type: Any = msgspec.field(default=None, name="Device Type")
    device_id: Any = msgspec.field(default=None, name="Device Id")
    addr: Any = msgspec.field(default=None, name="Addr")
    bytes: Any = msgspec.field(default=None, name="Bytes")
    total_allocated: Any = msgspec.field(default=None, name="Total Allocated")
    total_reserved: Any = msgspec.field(default=None, name="Total Reserved")


class NameArgs(msgspec.Struct, gc=False):
    name: Any = None
    labels: Any = None
    sort_index: Any = None
