"""Generate (or check) ``webhook/core/kueue/crd_defaults.json``: the OpenAPI ``default:`` values of the
workload CRDs Kueue pins, which the API server writes into an object before any webhook sees it.

``kgov mutate`` and ``kgov review`` have no API server, so they apply these defaults themselves
(:mod:`webhook.core.kueue.crd_defaults`) and plan the object the cluster would store: a RayJob without
``submissionMode`` is a ``K8sJobMode`` RayJob with a ``submitter`` podset, a Ray worker group
without ``replicas`` has 0. The CRD files come from the Go modules at the versions Kueue v0.19.2
is built with (the e2e cluster installs the same files, :data:`e2e.manifests.WORKLOAD_CRDS`), so
this needs Go; the generated file is checked in, so an installed ``kgov`` needs neither Go nor the
CRDs.

Kept: each default of a served version of a kind the governor has a row for, outside ``status``,
pod specs (a schema with ``containers``) and a role's pod fields (``env``, ``volumes``,
``initContainers``…: an env reference's name, a volume's filesystem, which never change podsets,
names or sizes), as ``path`` (``"*"`` for list items and map values) and ``default``, with
``nullable`` when the field takes null (a null non-nullable field is pruned, then defaulted).

Command line::

    python -m e2e.crd_defaults            # rewrite webhook/core/kueue/crd_defaults.json
    python -m e2e.crd_defaults --check    # exit 1 when it differs from the CRDs
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
from pathlib import Path
from typing import Any

import yaml

from e2e import build
from e2e.manifests import WORKLOAD_CRDS
from webhook.core.kueue.crd_defaults import DATA_PATH
from webhook.core.kueue.kinds import find_kind

#: The CRDs of the workload kinds whose defaults are kept: the e2e cluster's, and those of the
#: kinds it does not install that Kueue pins too.
CRD_FILES = [
    *WORKLOAD_CRDS,
    ("github.com/ray-project/kuberay/ray-operator", "config/crd/bases", "ray.io_rayservices.yaml"),
    ("github.com/kubeflow/spark-operator/v2", "config/crd/bases", "sparkoperator.k8s.io_sparkapplications.yaml"),
]

Default = dict[str, Any]
#: Pod fields a role spec may carry outside a ``PodSpec`` (a SparkApplication's ``driver``): their
#: defaults (an env reference's name, a volume's filesystem) never change podsets, names or sizes.
_POD_PARTS = frozenset({"volumes", "initContainers", "sidecars", "env", "envFrom"})


def _walk(schema: Any, path: tuple[str, ...], out: list[Default]) -> None:
    if not isinstance(schema, dict):
        return
    properties = schema.get("properties") or {}
    if "containers" in properties:  # a PodSpec: nothing below changes podsets, names or sizes
        return
    if "default" in schema and path:
        entry: Default = {"path": list(path), "default": schema["default"]}
        if schema.get("nullable"):
            entry["nullable"] = True
        out.append(entry)
    for key, value in properties.items():
        if (not path and key == "status") or key in _POD_PARTS:
            continue
        _walk(value, (*path, key), out)
    for nested in ("items", "additionalProperties"):
        if isinstance(schema.get(nested), dict):
            _walk(schema[nested], (*path, "*"), out)


def defaults_of(crd: dict[str, Any]) -> dict[str, list[Default]]:
    """``"group/version/Kind"`` → its defaults, for each served version the governor has a row for."""
    spec = crd["spec"]
    group, kind = spec["group"], spec["names"]["kind"]
    found: dict[str, list[Default]] = {}
    for version in spec.get("versions") or []:
        if not version.get("served") or find_kind(f"{group}/{version['name']}", kind) is None:
            continue
        out: list[Default] = []
        _walk(((version.get("schema") or {}).get("openAPIV3Schema")), (), out)
        if out:
            found[f"{group}/{version['name']}/{kind}"] = sorted(out, key=lambda d: (len(d["path"]), d["path"]))
    return found


def generate() -> str:
    """The JSON text of the data file, from the CRD files of :data:`CRD_FILES`.

    Raises:
        FileNotFoundError: a CRD file named there is not in its module.
        RuntimeError: a module could not be downloaded (no Go, no module proxy).
    """
    kinds: dict[str, list[Default]] = {}
    sources: dict[str, str] = {}
    for module, directory, pattern in CRD_FILES:
        root = build.dependency_dir("kueue", module)
        files = sorted((root / directory).glob(pattern))
        if not files:
            raise FileNotFoundError(f"no CRD {pattern} under {directory} in {module} ({root})")
        for path in files:
            for document in yaml.safe_load_all(path.read_text()):
                if isinstance(document, dict) and document.get("kind") == "CustomResourceDefinition":
                    found = defaults_of(document)
                    kinds.update(found)
                    for name in found:
                        sources[name] = f"{root.name} {directory}/{path.name}"
    data = {
        "about": "OpenAPI defaults of the workload CRDs Kueue pins; generated by `make crd-defaults` "
        "(python -m e2e.crd_defaults), do not edit",
        "sources": dict(sorted(sources.items())),
        "kinds": dict(sorted(kinds.items())),
    }
    return json.dumps(data, indent=1, sort_keys=False) + "\n"


def check(path: Path = DATA_PATH) -> list[str]:
    """The unified diff between ``path`` and what the CRDs give ([] when they agree)."""
    want = generate()
    have = path.read_text() if path.exists() else ""
    return list(difflib.unified_diff(have.splitlines(), want.splitlines(), str(path), "generated", lineterm=""))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.crd_defaults", description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when the checked-in file differs")
    args = parser.parse_args(argv)
    if args.check:
        diff = check()
        if diff:
            print("\n".join(diff), file=sys.stderr)
            print(f"{DATA_PATH} is out of date: run `make crd-defaults`", file=sys.stderr)
            return 1
        print(f"{DATA_PATH} matches the CRDs", file=sys.stderr)
        return 0
    DATA_PATH.write_text(generate())
    print(f"wrote {DATA_PATH}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
