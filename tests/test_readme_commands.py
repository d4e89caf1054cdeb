"""The README's quick start and the docs' Getting started and Commands pages say what the commands do
now: the `make example` excerpt, each command's exit codes, the options of `kgov certs create`,
`kgov serve --help`."""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from support import REPO

from webhook.cli import main

README = (REPO / "README.md").read_text(encoding="utf-8")
GETTING_STARTED = (REPO / "docs" / "getting-started.md").read_text(encoding="utf-8")
COMMANDS = (REPO / "docs" / "commands.md").read_text(encoding="utf-8")
MAKEFILE = (REPO / "Makefile").read_text(encoding="utf-8")


def _example_args() -> list[str]:
    """The arguments of `kgov` in the Makefile's ``example`` target."""
    recipe = MAKEFILE.split("\nexample:", 1)[1].split("\n\n", 1)[0]
    command = " ".join(line.strip().rstrip("\\") for line in recipe.splitlines()[1:])
    return shlex.split(command.split("$(KGOV)", 1)[1])


@pytest.mark.parametrize("page", [README, GETTING_STARTED], ids=["README", "getting-started"])
def test_the_quick_start_excerpt_is_what_make_example_prints(monkeypatch: pytest.MonkeyPatch, page: str) -> None:
    """Regression: the excerpt lacked the team, priority and node-affinity lines and the
    'master' podset's topology lines the command prints."""
    monkeypatch.chdir(REPO)
    result = CliRunner().invoke(main, _example_args())
    assert result.exit_code == 0, result.stderr
    section = page.split("`make example` runs", 1)[1]
    excerpt = section.split("```\n", 1)[1].split("```\n", 1)[0]
    assert excerpt == result.stderr
    assert "# document 1: PyTorchJob llama-finetune" in excerpt


@pytest.mark.parametrize("page", [README, GETTING_STARTED], ids=["README", "getting-started"])
def test_the_quick_start_commands_are_the_makefiles(page: str) -> None:
    """The two commands of the quick start are targets of the Makefile, and `make test` runs what
    its comment says (the docs build among them)."""
    block = page.split("```sh\n", 1)[1].split("```", 1)[0]
    assert [line.split("#")[0].strip() for line in block.splitlines()] == ["make example", "make test"]
    prerequisites = MAKEFILE.split("\ntest:", 1)[1].split("\n", 1)[0].split()
    assert prerequisites == [
        "lint",
        "test-unit",
        "generate-check",
        "docs",
        "crd-defaults-check",
        "helm-check",
        "e2e-test",
    ]
    assert "builds the docs" in block


def _invalid_platform(tmp_path: Path) -> Path:
    platform = yaml.safe_load((REPO / "kueue-config" / "platform.yaml").read_text(encoding="utf-8"))
    platform["teams"][0]["quotas"][0]["resources"]["nvidia.com/gpu"]["nominalQuota"] = "1e400"
    path = tmp_path / "platform.yaml"
    path.write_text(yaml.safe_dump(platform), encoding="utf-8")
    return path


def test_readme_exit_codes_for_an_invalid_platform_are_the_commands(tmp_path: Path) -> None:
    """Regression: the README (the text is in docs/commands.md now) said 1 was a denied document or
    drift and 2 an unusable input file, yet
    `kgov generate` exited 1 on an invalid platform file. One grammar now: 2 for every command."""
    text = " ".join(COMMANDS.split())
    assert "So an invalid platform file is exit 2 for every command" in text
    platform = str(_invalid_platform(tmp_path))
    manifest = str(REPO / "examples" / "pytorchjob.yaml")
    runs = {
        "generate": ["generate", platform, "--out", str(tmp_path / "out")],
        "chart values": ["chart", "values", platform],
        "policy": ["policy", "--platform", platform],
        "mutate": ["mutate", "--platform", platform, "-n", "hyperpod-ns-research", "-f", manifest],
        "review": ["review", "--platform", platform],
        "diff": ["diff", platform],
    }
    for command, args in runs.items():
        result = CliRunner().invoke(main, args, input="{}")
        assert (command, result.exit_code) == (command, 2)
        assert result.stderr.startswith(f"kgov {command}: {platform}: invalid platform file\n"), result.stderr
        assert "nominalQuota" in result.stderr


def test_the_certs_create_row_shows_every_name_option() -> None:
    """Regression: the row lacked --dns, one of the names the command asks for."""
    [row] = [line for line in COMMANDS.splitlines() if line.startswith("| `kgov certs create")]
    for option in ("--service S", "--namespace NS", "--dns D", "--ip IP"):
        assert option in row
    result = CliRunner().invoke(main, ["certs", "create", "--help"])
    assert all(option.split()[0] in result.stdout for option in ("--service", "--namespace", "--dns", "--ip"))


def test_serve_help_shows_the_reuse_port_default() -> None:
    result = CliRunner().invoke(main, ["serve", "--help"])
    assert result.exit_code == 0
    option = result.stdout.split("--reuse-port / --no-reuse-port", 1)[1].split("-h, --help", 1)[0]
    assert "[default:no-reuse-port]" in "".join(option.split())
