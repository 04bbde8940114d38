"""Tests of `capture/`: traces of the tiny preset, sweeps, the scenario, errors, the API.

They run on a CPU with tiny shapes; every model capture here takes well under a second
once torch and transformers are imported. Traces are read with json/gzip only, so these
tests do not depend on tracekit's loader.
"""

from __future__ import annotations

import ast
import gzip
import json
import subprocess
import sys
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

torch = pytest.importorskip("torch")

from tracekit.capture import CaptureError, available
from tracekit.capture.cli import capture_command

ROOT = Path(__file__).resolve().parents[1]
SMALL = ["--prompt-len", "16", "--new-tokens", "4", "--warmup", "0", "--repeats", "1"]
TINY_LAYERS = 2
MODEL_KEYS = {
    "schema_version",
    "tool",
    "kind",
    "device",
    "versions",
    "gpu",
    "command",
    "created",
    "model",
    "attn_implementation",
    "attn_implementation_requested",
    "dtype",
    "mode",
    "shapes",
    "seed",
    "warmup",
    "repeats",
    "host",
    "annotations",
    "profiler",
}


def load_trace(path: Path) -> dict:
    """Parse a .json or .json.gz trace with the standard library."""
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as handle:
        return json.load(handle)


def annotations(trace: dict) -> list[dict]:
    return [e for e in trace["traceEvents"] if e.get("cat") == "user_annotation"]


def cpu_ops(trace: dict) -> list[dict]:
    return [e for e in trace["traceEvents"] if e.get("cat") == "cpu_op"]


def inside(child: dict, parent: dict) -> bool:
    """Same thread and `child`'s time span within `parent`'s (0.01 us slack for rounding)."""
    same_thread = (child["pid"], child["tid"]) == (parent["pid"], parent["tid"])
    start_ok = child["ts"] >= parent["ts"] - 0.01
    end_ok = child["ts"] + child["dur"] <= parent["ts"] + parent["dur"] + 0.01
    return same_thread and start_ok and end_ok


def names_inside(trace: dict, prefix: str) -> set[str]:
    ranges = [e for e in annotations(trace) if e["name"].startswith(prefix)]
    assert ranges, f"no {prefix} ranges"
    return {op["name"] for op in cpu_ops(trace) if any(inside(op, r) for r in ranges)}


def invoke(args: list[str]):
    return CliRunner().invoke(capture_command, args)


@pytest.fixture(scope="module")
def transformers():
    return pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory, transformers) -> Path:
    out_dir = tmp_path_factory.mktemp("sweep")
    result = invoke(["--out-dir", str(out_dir), "--variants", "eager,sdpa", *SMALL])
    assert result.exit_code == 0, result.output
    return out_dir


def test_sweep_writes_one_trace_per_variant_and_an_index(sweep_dir: Path) -> None:
    index = json.loads((sweep_dir / "index.json").read_text())
    assert [entry["variant"] for entry in index] == ["eager", "sdpa"]
    for entry in index:
        assert {"variant", "attn_implementation", "path", "model", "dtype", "device"} <= set(entry)
        assert entry["path"] == f"tiny-llama-{entry['variant']}.json.gz"
        assert (entry["model"], entry["dtype"], entry["device"]) == ("tiny-llama", "float32", "cpu")
        assert load_trace(sweep_dir / entry["path"])["traceEvents"]
    leftovers = sorted(p.name for p in sweep_dir.iterdir() if p.name.startswith("."))
    assert leftovers == [], "temporary files left behind"


@pytest.mark.parametrize("variant", ["eager", "sdpa"])
def test_trace_has_prefill_decode_and_attention_ranges(sweep_dir: Path, variant: str) -> None:
    names = [e["name"] for e in annotations(load_trace(sweep_dir / f"tiny-llama-{variant}.json.gz"))]
    assert names.count("prefill") == 1
    assert {"decode#0", "decode#1", "decode#2"} <= set(names) and "decode#3" not in names
    for layer in range(TINY_LAYERS):
        assert names.count(f"attention#{layer}") == 4  # prefill + 3 decode forwards


@pytest.mark.parametrize("variant", ["eager", "sdpa"])
def test_trace_metadata_records_requested_and_actual_attention(sweep_dir: Path, variant: str) -> None:
    trace = load_trace(sweep_dir / f"tiny-llama-{variant}.json.gz")
    meta = trace["tracekit_capture"]
    assert set(meta) == MODEL_KEYS
    assert meta["attn_implementation_requested"] == variant
    assert meta["attn_implementation"] == variant
    assert meta["model"]["id"] == "tiny-llama" and meta["model"]["weights"] == "random"
    assert meta["model"]["config"]["num_hidden_layers"] == TINY_LAYERS
    assert meta["shapes"] == {"batch": 1, "prompt_len": 16, "new_tokens": 4}
    assert meta["versions"]["torch"] == torch.__version__
    assert meta["versions"]["transformers"]
    assert meta["gpu"] is None and meta["device"] == "cpu" and meta["dtype"] == "float32"
    assert isinstance(meta["command"], list)
    assert trace["traceName"] == f"tiny-llama-{variant}.json.gz"


def test_sdpa_trace_runs_sdpa_inside_attention_ranges(sweep_dir: Path) -> None:
    ops = names_inside(load_trace(sweep_dir / "tiny-llama-sdpa.json.gz"), "attention#")
    assert "aten::scaled_dot_product_attention" in ops


def test_eager_trace_runs_matmul_and_softmax_inside_attention_ranges(sweep_dir: Path) -> None:
    ops = names_inside(load_trace(sweep_dir / "tiny-llama-eager.json.gz"), "attention#")
    assert ops & {"aten::matmul", "aten::bmm"}
    assert ops & {"aten::softmax", "aten::_softmax"}
    assert "aten::scaled_dot_product_attention" not in ops


def test_tracekit_loader_reads_capture_traces(sweep_dir: Path) -> None:
    import tracekit

    trace = tracekit.load(sweep_dir / "tiny-llama-sdpa.json.gz")
    assert trace.warnings.height == 0
    names = set(trace.ops.filter(trace.ops["cat"] == "user_annotation")["name"])
    assert {"prefill", "decode#0", "decode#2", "attention#0", "attention#1"} <= names
    meta = trace.meta.metadata.get("tracekit_capture") or trace.meta.extra.get("tracekit_capture")
    assert meta["attn_implementation"] == "sdpa"


def test_forward_mode_writes_plain_json(tmp_path: Path, transformers) -> None:
    out = tmp_path / "forward.json"
    result = invoke(["-o", str(out), "--mode", "forward", "--attn", "eager", *SMALL])
    assert result.exit_code == 0, result.output
    trace = load_trace(out)
    names = [e["name"] for e in annotations(trace)]
    assert names.count("prefill") == 1 and not any(n.startswith("decode#") for n in names)
    assert trace["tracekit_capture"]["mode"] == "forward"
    assert [p.name for p in tmp_path.iterdir()] == ["forward.json"]


def test_local_model_directory(tmp_path: Path, transformers) -> None:
    config = transformers.LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    transformers.LlamaForCausalLM._from_config(config).save_pretrained(tmp_path / "my-model")
    out = tmp_path / "local.json.gz"
    result = invoke(["--model", str(tmp_path / "my-model"), "-o", str(out), *SMALL])
    assert result.exit_code == 0, result.output
    meta = load_trace(out)["tracekit_capture"]
    assert meta["model"]["id"] == "my-model" and meta["model"]["source"] == "local"
    assert meta["model"]["weights"] == "pretrained"


def test_profile_context_manager_around_user_code(tmp_path: Path, transformers) -> None:
    from tracekit import capture

    config = transformers.LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    )
    model = transformers.LlamaForCausalLM._from_config(config, attn_implementation="sdpa").eval()
    ids = torch.randint(3, 64, (1, 8))
    out = tmp_path / "user.json.gz"
    with capture.profile(out, metadata={"experiment": "demo"}, model=model):
        model.generate(ids, max_new_tokens=3, min_new_tokens=3, do_sample=False)
    trace = load_trace(out)
    assert trace["tracekit_capture"]["experiment"] == "demo"
    assert trace["tracekit_capture"]["attn_implementation"] == "sdpa"
    names = {e["name"] for e in annotations(trace)}
    assert {"prefill", "decode#0", "decode#1", "attention#0", "attention#1"} <= names
    assert "generate" not in vars(model) and not model._forward_pre_hooks


def test_profile_context_manager_writes_nothing_when_the_body_fails(tmp_path: Path) -> None:
    from tracekit import capture

    with pytest.raises(KeyError), capture.profile(tmp_path / "never.json.gz"):
        torch.ones(2) + 1
        raise KeyError("boom")
    assert list(tmp_path.iterdir()) == []


def test_attention_variants_scenario(tmp_path: Path) -> None:
    shape = ["--batch", "1", "--heads", "2", "--seq", "32", "--head-dim", "16"]
    result = invoke(
        ["--scenario", "attention-variants", "--out-dir", str(tmp_path), "--device", "cpu", *shape]
    )
    assert result.exit_code == 0, result.output
    index = {entry["variant"]: entry for entry in json.loads((tmp_path / "index.json").read_text())}
    assert list(index) == [
        "eager",
        "eager-inplace",
        "sdpa-math",
        "sdpa-efficient",
        "sdpa-flash",
        "sdpa-cudnn",
    ]
    for gpu_only in ("sdpa-efficient", "sdpa-cudnn"):  # no CPU kernels for these backends
        assert index[gpu_only]["status"] == "skipped" and index[gpu_only]["path"] is None
        assert "cpu" in index[gpu_only]["note"]
    for variant in ("eager", "eager-inplace", "sdpa-math"):
        entry = index[variant]
        assert entry["status"] == "ok" and entry["shapes"] == {
            "batch": 1,
            "heads": 2,
            "seq": 32,
            "head_dim": 16,
        }
        trace = load_trace(tmp_path / entry["path"])
        assert [e["name"] for e in annotations(trace)].count("attn_fwd") == 3
        assert trace["tracekit_capture"]["variant"] == variant
    assert "aten::masked_fill_" in names_inside(load_trace(tmp_path / "eager-inplace.json.gz"), "attn_fwd")
    assert "aten::masked_fill" in names_inside(load_trace(tmp_path / "eager.json.gz"), "attn_fwd")


BAD_ARGUMENTS = [
    ["--model", "no-such-preset"],
    ["--model", "./no/such/dir"],
    ["--attn", "flash_attention_2", "--device", "cpu"],
    ["--attn", "bogus"],
    ["--out-dir", "x", "--variants", "eager,bogus"],
    ["--variants", "eager"],
    ["--scenario", "attention-variants", "--out-dir", "x", "--variants", "bogus"],
    ["--scenario", "attention-variants"],
    ["--heads", "4"],
    ["--batch", "0"],
    ["-o", "trace.txt"],
    ["--no-such-option"],
]


@pytest.mark.parametrize("args", BAD_ARGUMENTS, ids=lambda args: " ".join(args))
def test_bad_arguments_give_one_line_and_exit_2(args: list[str]) -> None:
    result = invoke(args)
    assert result.exit_code == 2, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: "), result.stderr
    assert "Traceback" not in result.output


def test_errors_stay_one_line_inside_a_group() -> None:
    group = click.Group("tracekit")
    group.add_command(capture_command)
    for args in (["capture", "--attn", "bogus"], ["capture", "--model", "nope"]):
        result = CliRunner().invoke(group, args)
        assert result.exit_code == 2 and len(result.stderr.splitlines()) == 1, result.stderr


def test_capture_error_is_one_line() -> None:
    assert str(CaptureError("a\nb   c")) == "a b c"


def test_help_documents_every_option() -> None:
    result = invoke(["--help"])
    assert result.exit_code == 0
    assert capture_command.name == "capture"
    for param in capture_command.params:
        assert param.help, f"{param.name} has no help"
        for opt in param.opts:
            assert opt in result.output


def test_available() -> None:
    assert available() is None or "pip install" in available()
    message = available(("no_such_package_for_tracekit",))
    assert "no_such_package_for_tracekit" in message and "pip install" in message


def test_capture_never_imports_tracekit() -> None:
    for source in (ROOT / "capture").glob("*.py"):
        for node in ast.walk(ast.parse(source.read_text())):
            if isinstance(node, ast.Import):
                modules = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                modules = [node.module or ""]
            else:
                continue
            assert not any(m == "tracekit" or m.startswith("tracekit.") for m in modules), source


def test_cli_module_imports_without_torch() -> None:
    code = "import sys, tracekit.capture, tracekit.capture.cli; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


def test_scenario_pins_threads_repeats_and_reports_progress(tmp_path: Path) -> None:
    shape = ["--batch", "1", "--heads", "2", "--seq", "16", "--head-dim", "8"]
    result = invoke(
        ["--scenario", "attention-variants", "--out-dir", str(tmp_path), "--device", "cpu",
         "--variants", "sdpa-math", "--threads", "1", "--repeats", "2", *shape]
    )
    assert result.exit_code == 0, result.output
    progress = [line for line in result.stderr.splitlines() if line.startswith("sdpa-math:")]
    assert progress[-2:] == ["sdpa-math: repeat 1/2", "sdpa-math: repeat 2/2"]
    assert "repeat" not in result.stdout
    trace = load_trace(tmp_path / "sdpa-math.json.gz")
    meta = trace["tracekit_capture"]
    assert meta["host"]["threads"] == 1 and meta["repeats"] == 2
    assert meta["host"]["cpu_count"] >= 1 and len(meta["host"]["loadavg"]) == 3
    assert meta["profiler"]["schedule"]["active"] == 2
    assert [e["name"] for e in annotations(trace)].count("attn_fwd") == 2
