"""Bad platform and policy files: a precise error naming the path, never a traceback.

Every path of the bundled ``kueue-config/platform.yaml`` gets JSON values of every type in turn
(in-process through :func:`webhook.core.platform.platform.parse_platform`, and as YAML files through
``kgov policy`` and ``kgov generate``); every path of the compiled policy it makes (``kgov policy``,
the ``--policy`` file of ``review``, ``mutate`` and ``serve``) too. A file that loads is then used:
the Kueue objects are generated, and the recorded AdmissionReviews are reviewed under its policy.
Hypothesis cuts and splices the YAML text.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result
from fuzzing import RECORDED, check_answer, examples, paths_of, recorded, replaced, scale
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError
from support import PLATFORM

from webhook.cli import main
from webhook.core.objects.paths import Key, dotted
from webhook.core.platform.platform import Platform, PlatformError, load_platform, parse_platform
from webhook.core.platform.policy import compile_policies
from webhook.core.platform.resolve import TeamIndex
from webhook.core.platform.yamlload import MAX_YAML_DEPTH
from webhook.generate.manifests import build_manifests
from webhook.kube.files import InputError, load_policies

BUNDLED = yaml.safe_load(PLATFORM.read_text())
POLICY = json.loads(load_policies(PLATFORM).model_dump_json())
WRONG: list[Any] = [None, True, 0, -1, 2**63, 1.5, "", "x", [], {}, ["x"], {"x": 1}, [{}], "1e400", "-1"]
BODIES = [recorded(path.name) for path in RECORDED]
#: A CREATE, an UPDATE and a JobSet: what a policy that loads is used on, path after path.
SOME_BODIES = [
    recorded(name) for name in ("v1-job-create.json", "v1-job-update-kueue-start.json", "v1beta1-jobset-create.json")
]


def _values_at(index: int, per_path: int = 3) -> list[Any]:
    """The values planted at the ``index``-th path: ``per_path`` in CI, taking turns so that every
    value is planted somewhere; ``per_path`` × KGOV_FUZZ_SCALE in a longer run (all of them from 5)."""
    count = min(len(WRONG), per_path * scale())
    return [WRONG[(index * count + turn) % len(WRONG)] for turn in range(count)]


def _exists(document: Any, path: str) -> bool:
    """Whether ``path`` (``teams[0].quotas[0].flavor``) is in ``document``, or names a field left out
    of a map that is (a required field)."""
    present = {dotted(p) for p in paths_of(document)}
    return path in present or re.sub(r"(\.[^.\[]+|\[\d+\])$", "", path) in present or path == ""


def _related(a: str, b: str) -> bool:
    short, long = sorted((a, b), key=len)
    return long == short or long.startswith((f"{short}.", f"{short}[")) or short == ""


def _use(platform: Platform) -> None:
    """A platform that loads is usable: its objects are generated and reviews answered under it."""
    policies = compile_policies(platform)
    build_manifests(platform)
    teams = TeamIndex(policies)
    for body in BODIES:
        check_answer(body, teams)


def test_every_json_type_at_every_path_of_the_bundled_platform_is_named_or_used() -> None:
    loaded = refused = 0
    for index, path in enumerate(paths_of(BUNDLED)[1:]):
        for value in _values_at(index):
            document = replaced(BUNDLED, path, value)
            try:
                platform = parse_platform(document)
            except PlatformError as exc:
                refused += 1
                assert exc.problems, exc
                for problem in exc.problems:
                    assert _exists(document, problem.path), (dotted(path), value, str(problem))
                try:  # a schema error is about the planted value (or what it holds, or its parent)
                    Platform.model_validate(document)
                except ValidationError:
                    assert any(_related(dotted(path), p.path) for p in exc.problems), (dotted(path), value, str(exc))
                continue
            loaded += 1
            _use(platform)
    assert loaded and refused


def _invoke(*args: str) -> Result:
    result = CliRunner().invoke(main, list(args))
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise AssertionError(f"kgov {' '.join(args)} raised") from result.exception
    assert "Traceback" not in result.output and "Traceback" not in result.stderr
    return result


@examples(25)
@given(data=st.data())
def test_any_value_in_a_platform_file_is_an_error_naming_its_path_in_kgov_policy_and_generate(
    data: st.DataObject, tmp_path_factory: pytest.TempPathFactory
) -> None:
    path: tuple[Key, ...] = data.draw(st.sampled_from(paths_of(BUNDLED)[1:]))
    value = data.draw(st.sampled_from(WRONG))
    file = tmp_path_factory.mktemp("platform") / "platform.yaml"
    file.write_text(yaml.safe_dump(replaced(BUNDLED, path, value)))
    try:
        load_platform(file)
    except PlatformError as exc:
        first = exc.problems[0]
        policy = _invoke("policy", "--platform", str(file))
        assert policy.exit_code == 2 and policy.stderr.startswith(f"kgov policy: {file}: invalid platform file\n")
        assert f"  {first}" in policy.stderr
        generate = _invoke("generate", str(file), "--out", str(file.parent / "out"))
        assert generate.exit_code == 2 and f"  {first}" in generate.stderr
        return
    assert _invoke("policy", "--platform", str(file)).exit_code == 0


def test_every_json_type_at_every_path_of_the_compiled_policy_is_named_or_used(tmp_path: Path) -> None:
    """The ``--policy`` file: refused naming the path (``teams[0].quotaLimits.cpu``), or used."""
    file = tmp_path / "policy.json"
    loaded = refused = 0
    for index, path in enumerate(paths_of(POLICY)[1:]):
        for value in _values_at(index, per_path=1):  # each load parses the file as YAML: 30 ms
            file.write_text(json.dumps(replaced(POLICY, path, value)))
            try:
                policies = load_policies(None, file)
            except InputError as exc:
                refused += 1
                named = [line.strip().split(": ", 1)[0] for line in str(exc).splitlines()[1:]]
                field = dotted(path)
                assert any(_related(field, n) for n in named), (field, value, str(exc))
                continue
            loaded += 1
            teams = TeamIndex(policies)
            for body in SOME_BODIES:
                check_answer(body, teams)
    assert loaded and refused


def test_a_quota_limit_that_is_no_quantity_is_refused_on_load(tmp_path: Path) -> None:
    """Regression: a policy file with ``quotaLimits: {cpu: x}`` loaded, and every review of a
    workload in that team's namespace raised QuantityError (HTTP 500)."""
    file = tmp_path / "policy.json"
    for value, reason in [
        ("x", "'x' is not a Kubernetes quantity (e.g. 8, 500m, 64Gi)"),
        ("-3", "'-3' is negative; a quota limit is a non-negative quantity"),
    ]:
        file.write_text(json.dumps(replaced(POLICY, ("teams", 0, "quotaLimits", "cpu"), value)))
        result = _invoke("review", "--policy", str(file))
        assert result.exit_code == 2
        assert result.stderr == f"kgov review: {file}: invalid policy file\n  teams[0].quotaLimits.cpu: {reason}\n"


@examples(40)
@given(data=st.data())
def test_any_cut_or_splice_of_the_platform_text_is_a_problem_or_a_platform(
    data: st.DataObject, tmp_path_factory: pytest.TempPathFactory
) -> None:
    text = PLATFORM.read_bytes()
    start = data.draw(st.integers(0, len(text)))
    if data.draw(st.booleans()):
        broken = text[:start]
    else:
        broken = (
            text[:start] + data.draw(st.binary(min_size=1, max_size=12)) + text[start + data.draw(st.integers(0, 12)) :]
        )
    file = tmp_path_factory.mktemp("platform") / "platform.yaml"
    file.write_bytes(broken)
    try:
        platform = load_platform(file)
    except PlatformError as exc:
        assert str(exc).startswith(f"{file}: invalid platform file\n") and exc.problems
        return
    _use(platform)


@pytest.mark.parametrize(
    ("text", "column"),
    [("[" * 50_000, MAX_YAML_DEPTH + 1), ("{a: " * 50_000, 4 * MAX_YAML_DEPTH + 1), ("teams: " + "[" * 50_000, 207)],
    ids=["arrays", "maps", "under-a-key"],
)
def test_fifty_thousand_levels_in_a_platform_file_are_refused_at_once(tmp_path: Path, text: str, column: int) -> None:
    file = tmp_path / "platform.yaml"
    file.write_text(text)
    started = time.perf_counter()
    with pytest.raises(PlatformError) as caught:
        load_platform(file)
    assert time.perf_counter() - started < 0.5
    assert [str(p) for p in caught.value.problems] == [
        f"{file} is not usable YAML: nested more than {MAX_YAML_DEPTH} levels deep (at line 1 column {column})"
    ]
