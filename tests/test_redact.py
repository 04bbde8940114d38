"""Credentials and unsafe control characters in any field of a trace stay out of every output:
reports (HTML, Markdown, JSON), diffs, `summary`/`findings` JSON, batch tables and index page;
`--no-redact` keeps them. Also: outputs name the trace file, not its absolute path."""

from __future__ import annotations

import json

import polars as pl
import pytest
from report_fixtures import decode_trace

from tracekit.batch import run_batch
from tracekit.cli.main import main
from tracekit.report.redact import REDACTED, is_secret_key, scrub, text, value

JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ0cmFjZWtpdCJ9.c2lnbmF0dXJlLW9mLXRoZS1qd3Q"
GITHUB = "ghp_" + "Gh1" * 12
HF = "hf_" + "Hug" * 12
GOOGLE = "AIza" + "Go0gleKeyXyZ" * 2 + "abcdefghijk"  # AIza + 35
STRIPE = "sk_live_" + "Str1pe" * 4
SLACK = "xoxb-123456789012-slackTOKENvalue"
OPAQUE = "opaqueBearer0123456789"
DB_PASSWORD = "hunter2-db-password"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
URL_PASSWORD = "p@ss@w0rd-in-url"
PEM_BODY = "MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7"
OPENAI = "sk-proj-" + "OpenAIkey0" * 3
NPM = "npm_" + "NpmToken12" * 4
SECRETS = [JWT, GITHUB, HF, GOOGLE, STRIPE, SLACK, OPAQUE, DB_PASSWORD, AWS_SECRET, URL_PASSWORD, "ss@w0rd-in-url", PEM_BODY,
           OPENAI, NPM]
CONTROLS = ["\x00", "\u202e", "\u2066", "\x1b"]
FILE_NAME = f"run-{HF}.json.gz"


def secret_trace():
    """A token in each field: traceName, metadata (camelCase keys, a URL, a PEM key), an op,
    a kernel, an annotation, a thread name; control characters in an op name."""
    b = decode_trace(3, names=[f"aten::mm load Authorization: Bearer {OPAQUE}", f"gemm_{STRIPE}_kernel {GITHUB}"],
                     extra_top={
                         "traceName": f"logs/{GOOGLE}.pt.trace.json",
                         "metadata": {"dbPassword": DB_PASSWORD, "awsSecretAccessKey": AWS_SECRET,
                                      "store": f"postgres://admin:{URL_PASSWORD}@db.example.com:5432/runs",
                                      "note": f"-----BEGIN PRIVATE KEY-----\n{PEM_BODY}\n-----END PRIVATE KEY-----",
                                      "env": [f"OPENAI={OPENAI}", f"NPM {NPM}"]}})
    b.annotation(f"auth Bearer {JWT}", 20_000, 100_000)
    b.op("aten::\u202eevil\x00op\u2066\x1b[31m", 30_000, 1_000)
    b.events.append({"ph": "M", "name": "thread_name", "pid": b.pid, "tid": 77, "args": {"name": f"worker {SLACK}"}})
    b.op("aten::zeros", 40_000, 1_000, tid=77)
    return b


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    d = tmp_path_factory.mktemp("secrets")
    return secret_trace().write(d / FILE_NAME), decode_trace(2).write(d / "plain.json.gz")


def _outputs(capsys, tmp_path, path, other, *flags) -> dict[str, str]:
    out = {}
    for kind in ("html", "md", "json"):
        target = tmp_path / f"r.{kind}"
        assert main(["report", str(path), "--no-cache", "-o", str(target), *flags]) == 0
        out[f"report.{kind}"] = target.read_text()
        target = tmp_path / f"d.{kind}"
        assert main(["diff", str(other), str(path), "--no-cache", "-o", str(target), *flags]) == 0
        out[f"diff.{kind}"] = target.read_text()
    capsys.readouterr()
    for cmd in ("summary", "findings", "critical-path"):
        for js in ("--json", None):
            assert main([cmd, str(path), "--no-cache", *flags, *([js] if js else [])]) in (0, 1)
            out[f"{cmd} {js or 'text'}"] = capsys.readouterr().out
    result = run_batch([str(path)], out_dir=tmp_path / "batch", jobs=1, reports=True, redact="--no-redact" not in flags)
    assert result.failed == 0
    out["summary.csv"] = (tmp_path / "batch" / "summary.csv").read_text()
    out["summary.parquet"] = str(pl.read_parquet(tmp_path / "batch" / "summary.parquet").rows())
    out["findings.parquet"] = str(pl.read_parquet(tmp_path / "batch" / "findings.parquet").rows())
    out["index.html"] = (tmp_path / "batch" / "index.html").read_text()
    out["batch report"] = "".join(p.read_text() for p in (tmp_path / "batch" / "reports").iterdir())
    return out


def test_no_secret_or_control_character_leaves_tracekit(traces, capsys, tmp_path):
    path, other = traces
    outputs = _outputs(capsys, tmp_path, path, other)
    for where, body in outputs.items():
        for secret in SECRETS:
            assert secret not in body, (where, secret)
        for c in CONTROLS:  # raw, or as a JSON escape
            assert c not in body and json.dumps(c)[1:-1] not in body, (where, c)
        if where.split(" ")[0] in ("report.html", "report.md", "report.json", "diff.html", "diff.md", "diff.json",
                                   "summary", "findings", "critical-path"):  # (a batch's `source` is the path)
            assert str(path.parent) not in body, where  # the file's name only, not its folder
    assert REDACTED in outputs["report.html"] and "auth Bearer [redacted]" in outputs["report.json"]
    assert "run-[redacted].json.gz" in outputs["report.json"]
    # the fields are shown: redaction, not absence, keeps them out
    assert "dbPassword" in outputs["report.json"] and "worker [redacted]" in outputs["report.html"]
    assert "aten::evilop[31m" in outputs["report.json"]


def test_no_redact_keeps_the_credentials(traces, capsys, tmp_path):
    path, other = traces
    outputs = _outputs(capsys, tmp_path, path, other, "--no-redact")
    everything = "".join(outputs.values())
    for secret in SECRETS:
        assert secret in everything, secret
    assert HF in outputs["summary.csv"] and GOOGLE in outputs["summary.csv"]  # file and trace name
    for c in CONTROLS:  # control characters go either way
        assert c not in outputs["report.html"]


def test_full_path_names_the_folder(traces, capsys):
    path, _ = traces
    assert main(["report", str(path), "--no-cache", "--format", "json"]) == 0
    facts = dict(map(tuple, json.loads(capsys.readouterr().out)["facts"]))
    assert facts["trace"] == "run-[redacted].json.gz"
    assert main(["report", str(path), "--no-cache", "--format", "json", "--full-path", "--no-redact"]) == 0
    assert dict(map(tuple, json.loads(capsys.readouterr().out)["facts"]))["trace"] == str(path)
    assert main(["summary", str(path), "--no-cache", "--json", "--full-path", "--no-redact"]) == 0
    assert json.loads(capsys.readouterr().out)["file"] == str(path)
    assert main(["summary", str(path), "--no-cache", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["file"] == "run-[redacted].json.gz"


@pytest.mark.parametrize(("secret", "near_miss"), [
    (JWT, "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ0cmFjZWtpdCJ9"),  # two parts: not a JWT
    (f"Bearer {OPAQUE}", "Bearer of bad news"),
    ("Authorization: Basic dXNlcjpwYXNzd29yZA==", "authorized: yes"),
    (f"-----BEGIN RSA PRIVATE KEY-----\n{PEM_BODY}\n-----END RSA PRIVATE KEY-----", "-----BEGIN CERTIFICATE-----"),
    (f"https://me:{URL_PASSWORD}@host.example/x", "https://host.example:8443/x?a=b@c"),
    (GITHUB, "ghp_short"),
    ("gho_" + "a1" * 18, "gho_"),
    ("github_pat_" + "11ABC_" * 8, "github_pat_"),
    (HF, "hf_hub_download"),
    ("AKIAIOSFODNN7EXAMPLE", "AKIAIOSFODNN7"),
    (f"aws_secret_access_key={AWS_SECRET}", "aws_region=us-east-1"),
    (GOOGLE, "AIzaShort"),
    (STRIPE, "sk_live_"),
    ("rk_live_" + "R3stricted" * 2, "rk_live_x"),
    ("pk_live_" + "Publishable" * 2, "pk_live"),
    (NPM, "npm_install"),
    (SLACK, "xoxb-"),
    (OPENAI, "sk-learn"),
    (f"dbPassword={DB_PASSWORD}", "max_tokens=128"),
    (f"x-api-key: {OPAQUE}", "aten::linear"),
])
def test_token_formats(secret, near_miss):
    assert REDACTED in text(secret) and secret not in text(f"at {secret} end")
    assert text(near_miss) == near_miss


def test_url_password_with_at_signs_keeps_user_and_host():
    assert text(f"postgres://admin:{URL_PASSWORD}@db:5432/x") == f"postgres://admin:{REDACTED}@db:5432/x"


@pytest.mark.parametrize(("key", "secret"), [
    ("dbPassword", True), ("awsSecretAccessKey", True), ("aws-secret-access-key", True), ("HF_TOKEN", True),
    ("apikey", True), ("APIKey", True), ("privateKey", True), ("Authorization", True), ("db.credentials", True),
    ("TOKENIZERS_PARALLELISM", False), ("max_tokens", False), ("maxTokens", False), ("author", False),
    ("pad_token_id", False), ("hostname", False),
])
def test_secret_keys_in_any_case_style(key, secret):
    assert is_secret_key(key) is secret
    assert (value(key, "x") == REDACTED) is secret


def test_controls_and_bidi_are_removed_tabs_and_newlines_kept():
    s = "a\x00b\x07c\u202ad\u202ee\u2066f\u2069g\u200eh\u200fi\u061cj\x1bk\x9bl\tm\nn"
    assert text(s) == "abcdefghijk" + "l\tm\nn"
    assert scrub({"k": [s]}, secrets=False) == {"k": ["abcdefghijkl\tm\nn"]}


def test_scrub_reuses_what_it_does_not_change():
    data = {"a": ["aten::mm", ("x", 1)], "b": 2.5}
    assert scrub(data) is data
    assert scrub({"a": [f"Bearer {OPAQUE}"]}) == {"a": [f"Bearer {REDACTED}"]}


def test_annotate_redacts_only_when_asked(traces, tmp_path):
    path, _ = traces
    for flags, kept in (([], True), (["--redact"], False)):
        out = tmp_path / f"a{len(flags)}.json"
        assert main(["annotate", str(path), "--no-cache", "-o", str(out), *flags]) == 0
        body = out.read_text()
        json.loads(body)  # still a trace
        for secret in SECRETS:
            assert (secret in body) is (kept and secret != HF), (flags, secret)  # (HF: in the file name only)
    assert "auth Bearer [redacted]" in body and "\\u202e" not in body
