"""A TrainJob or training runtime of the wrong shape: a runtime file whose podsets cannot be built
is an unusable input (``kgov mutate --runtime``, exit 2, naming the value), and a TrainJob whose
``spec.runtimePatches`` entries are no objects is a malformed object naming each one (docs/rules.md,
"TrainJob" and "Malformed objects"); neither is planned as a TrainJob without podsets."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner

from webhook.cli import main

ROOT = Path(__file__).resolve().parent.parent
PLATFORM = ROOT / "kueue-config" / "platform.yaml"
TRAINJOB = ROOT / "examples" / "trainjob.yaml"
RUNTIME = ROOT / "examples" / "training-runtime.yaml"


def _mutate(trainjob: Path, runtime: Path) -> Any:
    args = ["mutate", "--platform", str(PLATFORM), "-n", "hyperpod-ns-data-science", "-f", str(trainjob)]
    return CliRunner().invoke(main, [*args, "--runtime", str(runtime)], catch_exceptions=False)


def _runtime(**changes: Any) -> dict[str, Any]:
    runtime: dict[str, Any] = yaml.safe_load(RUNTIME.read_text())
    spec = runtime["spec"]
    for path, value in changes.items():
        node = spec
        *parents, last = path.split("__")
        for key in parents:
            node = node[int(key)] if isinstance(node, list) else node[key]
        node[last] = value
    return runtime


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"template": 5}, "spec.template must be an object"),
        ({"template__spec__replicatedJobs": {"a": 1}}, "spec.template.spec.replicatedJobs must be an array"),
        ({"template__spec__replicatedJobs": [7]}, "spec.template.spec.replicatedJobs[0] must be an object"),
        ({"template__spec__replicatedJobs__0__replicas": -1}, "replicatedJobs[0].replicas must be an integer"),
        ({"template__spec__replicatedJobs__0__name": 3}, "replicatedJobs[0].name must be a non-empty string"),
        ({"mlPolicy__numNodes": "x"}, 'spec.mlPolicy.numNodes must be an integer from 0 to 2147483647, got "x"'),
    ],
)
def test_a_runtime_file_of_the_wrong_shape_is_an_unusable_input(
    tmp_path: Path, changes: dict[str, Any], message: str
) -> None:
    runtime = tmp_path / "runtime.yaml"
    runtime.write_text(yaml.safe_dump(_runtime(**changes)))
    result = _mutate(TRAINJOB, runtime)
    assert result.exit_code == 2, result.stderr
    assert result.stderr.startswith(f"kgov mutate: {runtime}: document 1: ClusterTrainingRuntime 'torch-distributed': ")
    assert message in result.stderr


def test_runtime_patches_entries_that_are_no_objects_are_malformed(tmp_path: Path) -> None:
    trainjob = yaml.safe_load(TRAINJOB.read_text())
    trainjob["spec"]["runtimePatches"] = [5, {"manager": "me", "trainingRuntimeSpec": 3}]
    path = tmp_path / "trainjob.yaml"
    path.write_text(yaml.safe_dump(trainjob))
    result = _mutate(path, RUNTIME)
    assert result.exit_code == 1
    assert "malformed object: spec.runtimePatches[0] must be an object, got number 5" in result.stderr
    assert (
        "malformed object: spec.runtimePatches[1].trainingRuntimeSpec must be an object, got number 3" in result.stderr
    )


def test_the_example_runtime_and_trainjob_stay_usable() -> None:
    result = _mutate(TRAINJOB, RUNTIME)
    assert result.exit_code == 0, result.stderr
    assert yaml.safe_load(result.stdout)["spec"]["runtimePatches"][0]["manager"] == "kueue-governor.io/governor"


@pytest.mark.parametrize(
    ("ref", "message"),
    [
        (7, "spec.runtimeRef must be an object, got number 7"),
        ({"name": 5}, "spec.runtimeRef.name must be a string, got number 5"),
        ({}, "spec.runtimeRef.name is not set"),
    ],
)
def test_a_runtime_ref_of_the_wrong_type_is_named_as_such(tmp_path: Path, ref: Any, message: str) -> None:
    trainjob = yaml.safe_load(TRAINJOB.read_text())
    trainjob["spec"]["runtimeRef"] = ref
    path = tmp_path / "trainjob.yaml"
    path.write_text(yaml.safe_dump(trainjob))
    result = _mutate(path, RUNTIME)
    assert result.exit_code == 1, result.stderr  # a pod rule that cannot be applied on CREATE: denied
    assert f"not applied: TrainJob's pods come from its runtime: {message}" in result.stderr
