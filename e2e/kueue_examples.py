"""Kueue's own example manifests (``site/static/examples``) at a Kueue release, fetched once.

Kueue's Go module does not hold them: ``site/`` is a module of its own (``sigs.k8s.io/kueue/site``,
never tagged), which the module zip of ``sigs.k8s.io/kueue`` leaves out. So the e2e build
(``python -m e2e.build``) takes the folder from Kueue's git repository at the release tag, with
a shallow, blob-less, sparse clone (only the examples' files are downloaded), and keeps it in
``${KGOV_CACHE:-~/.cache/kueue-governor}/kueue-examples/<version>/`` with the commit it came from
in ``COMMIT``. ``KGOV_KUEUE_GIT`` names another clone of Kueue to read from (a URL or a local
path), e.g. a mirror on a machine without access to GitHub.

Command line::

    python -m e2e.kueue_examples [VERSION]   # fetch when missing, print the directory
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from e2e.build import KUEUE_VERSION, cache_dir, module_origin_commit

__all__ = ["EXAMPLES", "examples_dir", "fetch_examples"]

#: The folder of Kueue's repository that holds the examples.
EXAMPLES = "site/static/examples"
KUEUE_GIT = "https://github.com/kubernetes-sigs/kueue"


def examples_dir(version: str = KUEUE_VERSION) -> Path:
    """Where Kueue ``version``'s examples are kept (it exists once fetched: it holds ``COMMIT``)."""
    return cache_dir() / "kueue-examples" / version


def _git(*args: str, cwd: Path | None = None) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed: {proc.stderr.strip()}")
    return proc.stdout.strip()


def fetch_examples(version: str = KUEUE_VERSION, source: str | None = None) -> Path:
    """Fetch Kueue ``version``'s ``site/static/examples`` into :func:`examples_dir` unless it is
    there; return that directory.

    ``source``: the repository to clone (default ``$KGOV_KUEUE_GIT``, else Kueue's on GitHub; a
    local path is cloned through ``file://`` so that the clone stays shallow). The tag's commit
    must be the one the Go module proxy records for ``sigs.k8s.io/kueue@version`` (when it
    records one), so the examples are those of the Kueue the e2e cluster runs.

    Raises:
        RuntimeError: git failed (no network, no such tag), or the commits differ.
    """
    target = examples_dir(version)
    if (target / "COMMIT").is_file():
        return target
    url = source or os.environ.get("KGOV_KUEUE_GIT") or KUEUE_GIT
    if Path(url).is_dir():
        url = Path(url).resolve().as_uri()
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".partial-") as scratch:
        clone = Path(scratch) / "kueue"
        shallow = ("--depth=1", "--filter=blob:none", "--no-checkout")
        _git("clone", "--quiet", *shallow, f"--branch={version}", url, str(clone))
        _git("sparse-checkout", "set", "--no-cone", f"/{EXAMPLES}/", cwd=clone)
        _git("checkout", "--quiet", cwd=clone)
        commit = _git("rev-parse", "HEAD", cwd=clone)
        expected = module_origin_commit("sigs.k8s.io/kueue", version)
        if expected and expected != commit:
            raise RuntimeError(f"{url} tag {version} is commit {commit}; the Go module proxy says {expected}")
        folder = clone / EXAMPLES
        (folder / "COMMIT").write_text(f"{commit}\n")
        shutil.rmtree(target, ignore_errors=True)
        folder.rename(target)
    return target


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    print(fetch_examples(*(args[:1] or [KUEUE_VERSION])))
    return 0


if __name__ == "__main__":
    sys.exit(main())
