"""One grammar for every ``kgov`` command (docs/commands.md, "One grammar"): each command run with a good input and
with bad ones, through the ``kgov`` group as a user runs it.

An error is one line ``kgov <command>: <message>`` on stderr (details indented below), never a
traceback; exit 0 is success, 1 "the answer is no", 2 bad usage or an input that cannot be used.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner, Result

from webhook.cli import main
from webhook.cli.errors import command_path

REPO = Path(__file__).resolve().parents[1]
PLATFORM = REPO / "kueue-config" / "platform.yaml"
NODES = REPO / "examples" / "nodes.json"
JOB = REPO / "examples" / "job.yaml"
REVIEW = REPO / "tests" / "data" / "admission" / "v1-job-create.json"
SNAPSHOT = REPO / "tests" / "data" / "why" / "bundled.json"
QUOTA = REPO / "tests" / "data" / "hyperpod" / "quota-research.json"
P5 = "ml.p5.48xlarge=cpu=192,memory=2Ti,nvidia.com/gpu=8"

#: Every command of the group, as its path; a new command must be added to the tables below.
COMMANDS = {
    "review",
    "mutate",
    "serve",
    "schema",
    "policy",
    "generate",
    "diff",
    "import-hyperpod",
    "chart values",
    "chart kinds",
    "chart schema",
    "topology",
    "topology label",
    "certs create",
    "certs renew",
    "certs inject",
    "why",
    "status",
    "completion",
}


def kgov(*args: str, stdin: str | None = None) -> Result:
    return CliRunner().invoke(main, list(args), input=stdin)


def _paths(group: object, prefix: str = "") -> set[str]:
    import click

    assert isinstance(group, click.Group)
    found: set[str] = set()
    for name, command in group.commands.items():
        path = f"{prefix}{name}"
        if isinstance(command, click.Group) and command.commands:
            found |= _paths(command, f"{path} ")
            if not getattr(command, "invoke_without_command", False):
                continue
        found.add(path)
    return found


def test_the_tables_name_every_command() -> None:
    assert _paths(main) == COMMANDS


def _schema_copy(tmp_path: Path) -> Path:
    """A copy of the chart's values.schema.json for ``kgov chart schema`` to rewrite."""
    copy = tmp_path / "values.schema.json"
    copy.write_text((REPO / "helm" / "kueue-governor" / "values.schema.json").read_text(encoding="utf-8"))
    return copy


def _good(tmp_path: Path) -> dict[str, list[str]]:
    certs = tmp_path / "certs"
    return {
        "review": ["review", "--platform", str(PLATFORM), "-f", str(REVIEW)],
        "mutate": ["mutate", "--platform", str(PLATFORM), "-n", "hyperpod-ns-research", "-f", str(JOB)],
        "serve": ["serve", "--help"],
        "schema": ["schema", "-o", "yaml"],
        "policy": ["policy", "--platform", str(PLATFORM), "-o", "yaml"],
        "generate": ["generate", str(PLATFORM), "--out", str(tmp_path / "generated")],
        "diff": ["diff", "--help"],
        "import-hyperpod": ["import-hyperpod", "--quota", str(QUOTA), "--instance-resources", P5],
        "chart values": ["chart", "values", str(PLATFORM), "-n", "kgov", "--out", str(tmp_path / "values.yaml")],
        "chart kinds": ["chart", "kinds", "--out", str(tmp_path / "kinds.yaml")],
        "chart schema": ["chart", "schema", "--out", str(_schema_copy(tmp_path))],
        "topology": ["topology", "--nodes", str(NODES), "-o", "json"],
        "topology label": ["topology", "label", "--help"],
        "certs create": ["certs", "create", str(certs), "--dns", "kgov.example"],
        "certs renew": ["certs", "renew", "--help"],
        "certs inject": ["certs", "inject", "--help"],
        "why": ["why", "job/finetune", "-n", "hyperpod-ns-research", "--snapshot", str(SNAPSHOT), "-o", "json"],
        "status": ["status", "--snapshot", str(SNAPSHOT), "-o", "json"],
        "completion": ["completion", "bash"],
    }


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_succeeds_with_a_good_input(command: str, tmp_path: Path) -> None:
    result = kgov(*_good(tmp_path)[command])
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    assert result.stdout or command in ("generate", "chart values", "chart kinds", "chart schema", "certs create")


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_names_itself_in_a_usage_error(command: str) -> None:
    result = kgov(*command.split(), "--no-such-flag")
    assert result.exit_code == 2
    lines = result.stderr.splitlines()
    assert lines[0] == f"kgov {command}: No such option '--no-such-flag'."
    assert lines[1:] == [f"  see 'kgov {command} --help'"]
    assert result.stdout == ""


#: A bad input for each command that reads one: (arguments, exit code, start of the error line).
BAD_INPUTS: dict[str, tuple[list[str], int, str]] = {
    "review": (["review", "--platform", "{platform}", "-f", str(REVIEW)], 2, "{platform}: invalid platform file"),
    "mutate": (
        ["mutate", "--platform", "{platform}", "-n", "hyperpod-ns-research", "-f", str(JOB)],
        2,
        "{platform}: invalid platform file",
    ),
    "serve": (
        ["serve", "--platform", "{platform}", "--tls-cert-file", "{platform}", "--tls-private-key-file", "{platform}"],
        2,
        "{platform}: invalid platform file",
    ),
    "policy": (["policy", "--platform", "{platform}"], 2, "{platform}: invalid platform file"),
    "generate": (["generate", "{platform}", "--out", "{tmp}/out"], 2, "{platform}: invalid platform file"),
    "diff": (["diff", "{platform}"], 2, "{platform}: invalid platform file"),
    "chart values": (["chart", "values", "{platform}"], 2, "{platform}: invalid platform file"),
    "topology": (["topology", "--nodes", "{platform}"], 2, "{platform}: "),
    "why": (["why", "job/x", "--snapshot", "{platform}"], 2, "--snapshot {platform}: "),
    "status": (["status", "--snapshot", "{platform}"], 2, "--snapshot {platform}: "),
    "import-hyperpod": (["import-hyperpod", "--quota", "{platform}", "--instance-resources", P5], 2, "{platform}"),
    "topology label": (["topology", "label", "--from", "{platform}", "--nodes", str(NODES)], 2, "{platform}"),
    "certs renew": (["certs", "renew", "{tmp}/none"], 2, "{tmp}/none"),
    "completion": (["completion", "tcsh"], 2, "Invalid value for '{{bash|zsh|fish}}'"),
}


@pytest.mark.parametrize("command", sorted(BAD_INPUTS))
def test_a_bad_input_is_one_line_naming_the_command(command: str, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("teams: [\n")
    args, code, start = BAD_INPUTS[command]
    filled = [a.format(platform=bad, tmp=tmp_path) for a in args]
    result = kgov(*filled, stdin="{}")
    assert result.exit_code == code, result.output
    # kgov serve logs as a server does, in JSON lines; its error line follows them
    first, *rest = [line for line in result.stderr.splitlines() if not line.startswith("{")]
    assert first.startswith(f"kgov {command}: {start.format(platform=bad, tmp=tmp_path)}"), result.stderr
    assert all(line.startswith("  ") for line in rest), result.stderr
    assert "Traceback" not in result.output


def test_the_answer_no_is_exit_1(tmp_path: Path) -> None:
    """A denied document, and drift from the files on disk."""
    denied = tmp_path / "stolen.yaml"
    denied.write_text((REPO / "examples" / "jobset-stolen-queue.yaml").read_text())
    result = kgov("mutate", "--platform", str(PLATFORM), "-n", "hyperpod-ns-research", "-f", str(denied))
    assert result.exit_code == 1
    first, *reasons = result.stderr.splitlines()
    assert first == "kgov mutate: document 1 denied, 2 reasons:"
    assert [reason.split(":")[0] for reason in reasons] == ["  queue", "  kueuePriority"]
    out = tmp_path / "generated"
    assert kgov("generate", str(PLATFORM), "--out", str(out)).exit_code == 0
    (out / "cohorts.yaml").write_text((out / "cohorts.yaml").read_text() + "# edited\n")
    drift = kgov("generate", str(PLATFORM), "--out", str(out), "--check")
    assert drift.exit_code == 1
    assert (
        drift.stderr.splitlines()[-1]
        == f"kgov generate: {out} is out of date: run `kgov generate {PLATFORM} --out {out}`"
    )


def test_generate_refuses_to_overwrite_a_file_it_did_not_write(tmp_path: Path) -> None:
    out = tmp_path / "mine"
    out.mkdir()
    (out / "cohorts.yaml").write_text("# my own notes\n")
    refused = kgov("generate", str(PLATFORM), "--out", str(out))
    assert refused.exit_code == 2
    assert refused.stderr.splitlines() == [
        f"kgov generate: --out {out}: would overwrite files kgov did not write; give another --out, or --force",
        f"  {out / 'cohorts.yaml'}",
    ]
    assert (out / "cohorts.yaml").read_text() == "# my own notes\n"
    forced = kgov("generate", str(PLATFORM), "--out", str(out), "--force")
    assert forced.exit_code == 0, forced.output
    assert (out / "cohorts.yaml").read_text().startswith("# Generated by `kgov generate`")
    again = kgov("generate", str(PLATFORM), "--out", str(out))
    assert again.exit_code == 0, again.output


def test_mutate_prints_the_namespace_it_judged_for(tmp_path: Path) -> None:
    """Regression: the Job kept its own ``metadata.namespace: default``; piped into ``kubectl apply``
    it landed in default under another team's LocalQueue name."""
    manifest = tmp_path / "job.yaml"
    job = yaml.safe_load(JOB.read_text())
    job.setdefault("metadata", {})["namespace"] = "default"
    manifest.write_text(yaml.safe_dump(job))
    result = kgov("mutate", "--platform", str(PLATFORM), "-n", "hyperpod-ns-inference", "-f", str(manifest))
    assert result.exit_code == 0, result.output
    out = yaml.safe_load(result.stdout)
    assert out["metadata"]["namespace"] == "hyperpod-ns-inference"
    assert out["metadata"]["labels"]["kueue.x-k8s.io/queue-name"] == "hyperpod-ns-inference-localqueue"
    assert "says namespace 'default'; reviewed in 'hyperpod-ns-inference' (-n)" in result.stderr
    as_json = kgov(
        "mutate", "--platform", str(PLATFORM), "-n", "hyperpod-ns-inference", "-f", str(manifest), "-o", "json"
    )
    assert json.loads(as_json.stdout) == out


def test_version_and_completion() -> None:
    version = kgov("--version")
    assert version.exit_code == 0 and version.stdout.startswith("kgov, version ")
    for shell, marker in (("bash", "complete -o"), ("zsh", "#compdef kgov"), ("fish", "complete --no-files")):
        script = kgov("completion", shell)
        assert script.exit_code == 0 and marker in script.stdout and "_KGOV_COMPLETE" in script.stdout


def test_import_hyperpod_suggests_no_resources_for_an_instance_it_does_not_know(tmp_path: Path) -> None:
    """Regression: the hint for ml.m5.2xlarge, a CPU instance, suggested 8 GPUs."""
    quota = tmp_path / "q.json"
    quota.write_text(
        json.dumps(
            {
                "Name": "a",
                "ComputeQuotaConfig": {"ComputeQuotaResources": [{"InstanceType": "ml.m5.2xlarge", "Count": 2}]},
                "ComputeQuotaTarget": {"TeamName": "a"},
            }
        )
    )
    result = kgov("import-hyperpod", "--quota", str(quota), "--instance-resources", P5)
    assert result.exit_code == 2
    assert "ml.m5.2xlarge=cpu=N,memory=QTY" in result.stderr
    assert "gpu=8" not in result.stderr and "cpu=192" not in result.stderr


def test_command_path_follows_the_arguments() -> None:
    assert command_path(main, ["chart", "values", "x", "-o", "y"]) == "kgov chart values"
    assert command_path(main, ["--version"]) == "kgov"
    assert command_path(main, ["topology", "label", "--from", "t.json"]) == "kgov topology label"
    assert command_path(main, ["nope"]) == "kgov"


def test_an_unexpected_failure_is_one_line_not_a_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(*_: object, **__: object) -> None:
        raise RuntimeError("boom")

    monkeypatch.setattr("webhook.cli.platform.platform_json_schema", broken)
    result = kgov("schema")
    assert result.exit_code == 2
    assert result.stderr.splitlines() == [
        "kgov schema: internal error: RuntimeError: boom",
        "  please report it with the command line",
    ]


def test_mutate_says_when_its_output_is_partial_and_what_it_left_as_it_is(tmp_path: Path) -> None:
    """Regression: with one document of three denied, the two others were printed with nothing on
    stderr to say so (piped into kubectl apply, a partial set was created); and a ConfigMap of another
    namespace was said to be "printed for" -n while it kept its own."""
    manifest = tmp_path / "mix.yaml"
    manifest.write_text(
        "apiVersion: batch/v1\nkind: Job\nmetadata: {name: a}\n"
        "spec: {template: {spec: {containers: [{name: c, image: x}], restartPolicy: Never}}}\n---\n"
        "apiVersion: kubeflow.org/v1\nkind: MPIJob\nmetadata: {name: m}\nspec: {}\n---\n"
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cm, namespace: default}\n"
    )
    result = kgov("mutate", "--platform", str(PLATFORM), "-n", "hyperpod-ns-research", "-f", str(manifest))
    assert result.exit_code == 1
    lines = result.stderr.splitlines()
    assert lines[-1] == "kgov mutate: 1 of 3 documents denied: the output holds only the 2 admitted"
    assert "kgov mutate: document 3 says namespace 'default': not a workload kind, printed as it is (in 'default')" in (
        lines
    )
    printed = [d for d in yaml.safe_load_all(result.stdout) if d]
    assert [(d["kind"], d["metadata"].get("namespace")) for d in printed] == [
        ("Job", "hyperpod-ns-research"),
        ("ConfigMap", "default"),
    ]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["-o", "png", "--out", "st.txt"], "--out st.txt: a .txt file, but -o png; give a matching -o or --out"),
        (["--out", "st.png"], "--out st.png: a .png file, but -o table; give a matching -o or --out"),
        (["-o", "json", "--out", "st.png"], "--out st.png: a .png file, but -o json; give a matching -o or --out"),
    ],
)
def test_status_refuses_a_file_that_names_another_format(
    args: list[str], message: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Regression: ``-o png --out st.txt`` wrote a PNG into st.txt (kgov topology refused the same)."""
    monkeypatch.chdir(tmp_path)
    result = kgov("status", "--snapshot", str(SNAPSHOT), *args)
    assert (result.exit_code, result.stderr) == (2, f"kgov status: {message}\n")
    assert list(tmp_path.iterdir()) == []
