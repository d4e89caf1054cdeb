"""Coverage-guided fuzzing of the webhook's inputs with atheris (libFuzzer), for a longer run than CI's.

Targets (``--target``):

- ``review``: bytes as an AdmissionReview body, through :func:`webhook.core.admission.envelope.decode_body`
  and :func:`webhook.core.admission.review.review` under the bundled platform's policy, with the example
  nodes; checked as ``tests/fuzzing.py`` checks every fuzz test's answer (a precise 400 reason, or
  the request's uid and a patch that applies with the ``jsonpatch`` library).
- ``platform``: bytes as a platform file, through :func:`webhook.core.platform.platform.load_platform`; a
  file that loads is compiled and its Kueue objects generated. Only ``PlatformError`` may be raised.
- ``policy``: bytes as a ``--policy`` file, through :func:`webhook.kube.files.load_policies`; a policy
  that loads answers the recorded reviews. Only ``InputError`` may be raised.

Seeds come from ``tests/data/admission`` and ``kueue-config/platform.yaml``; new inputs are kept in
``.fuzz/<target>/`` (not in git). Any other exception, or a broken contract, stops the run and
libFuzzer writes the input to ``crash-*`` in the current directory. Run through ``make fuzz``
(``FUZZ_SECONDS`` per target) or directly::

    .venv/bin/python tools/fuzz_atheris.py --target review -max_total_time=600
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import atheris
import yaml

REPO = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(REPO), str(REPO / "tests")]

with atheris.instrument_imports():
    from fuzzing import RECORDED, check_answer, recorded

    from webhook.core.platform.platform import PlatformError, load_platform
    from webhook.core.platform.policy import compile_policies
    from webhook.core.platform.resolve import TeamIndex
    from webhook.generate.manifests import build_manifests
    from webhook.kube.files import InputError, load_nodes, load_policies

PLATFORM = REPO / "kueue-config" / "platform.yaml"
TEAMS = TeamIndex(load_policies(PLATFORM))
NODES = load_nodes(REPO / "examples" / "nodes.json")
BODIES = [recorded(path.name) for path in RECORDED]
SCRATCH = Path(tempfile.mkdtemp(prefix="kgov-fuzz-"))


def review_target(data: bytes) -> None:
    check_answer(data, TEAMS, inventory=NODES)


def platform_target(data: bytes) -> None:
    file = SCRATCH / "platform.yaml"
    file.write_bytes(data)
    try:
        platform = load_platform(file)
    except PlatformError as exc:
        assert exc.problems, "a PlatformError lists its problems"
        return
    compile_policies(platform)
    build_manifests(platform)


def policy_target(data: bytes) -> None:
    file = SCRATCH / "policy.json"
    file.write_bytes(data)
    try:
        teams = TeamIndex(load_policies(None, file))
    except InputError:
        return
    for body in BODIES:
        check_answer(body, teams)


#: What the structure-aware mutator plants: a value of each JSON type, and numbers Kubernetes refuses.
PLANTED: list[Any] = [None, True, 0, -1, 2**31, 2**63, 1.5, "", "x", "8Xi", "-1", [], {}, ["x"], {"x": 1}, [{}]]


def _paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(node, dict):
        for key, value in node.items():
            out.extend(_paths(value, (*prefix, key)))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            out.extend(_paths(value, (*prefix, index)))
    return out


def _structured(
    data: bytes, max_size: int, seed: int, load: Callable[[bytes], Any], dump: Callable[[Any], bytes]
) -> bytes:
    """Half the time, a value planted at a random path of the decoded input (or a key removed);
    otherwise, or when the input does not decode, libFuzzer's byte mutation."""
    chance = random.Random(seed)
    if chance.random() < 0.5:
        try:
            document = load(data)
        except Exception:  # not decodable: bytes it is
            document = None
        paths = _paths(document)[1:] if isinstance(document, dict | list) else []
        if paths:
            path = chance.choice(paths)
            parent = document
            for key in path[:-1]:
                parent = parent[key]
            if isinstance(parent, dict) and chance.random() < 0.2:
                del parent[path[-1]]
            else:
                parent[path[-1]] = chance.choice(PLANTED)
            out = dump(document)
            if len(out) <= max_size:
                return out
    return bytes(atheris.Mutate(data, max_size))


def _json_mutator(data: bytes, max_size: int, seed: int) -> bytes:
    return _structured(data, max_size, seed, json.loads, lambda value: json.dumps(value).encode())


def _yaml_mutator(data: bytes, max_size: int, seed: int) -> bytes:
    return _structured(data, max_size, seed, yaml.safe_load, lambda value: yaml.safe_dump(value).encode())


Mutator = Callable[[bytes, int, int], bytes]
TARGETS: dict[str, tuple[Callable[[bytes], None], list[bytes], Mutator]] = {
    "review": (review_target, [path.read_bytes() for path in RECORDED], _json_mutator),
    "platform": (platform_target, [PLATFORM.read_bytes()], _yaml_mutator),
    "policy": (policy_target, [load_policies(PLATFORM).model_dump_json(indent=2).encode()], _json_mutator),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", choices=sorted(TARGETS), required=True)
    options, libfuzzer_args = parser.parse_known_args()
    target, seeds, mutator = TARGETS[options.target]
    corpus = REPO / ".fuzz" / options.target
    corpus.mkdir(parents=True, exist_ok=True)
    for index, seed in enumerate(seeds):
        (corpus / f"seed-{index}").write_bytes(seed)
    try:
        atheris.Setup([sys.argv[0], *libfuzzer_args, str(corpus)], target, custom_mutator=mutator)
        atheris.Fuzz()
    finally:
        shutil.rmtree(SCRATCH, ignore_errors=True)


if __name__ == "__main__":
    main()
