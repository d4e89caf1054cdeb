"""tools/mutation_score.py: the score of `make mutate` from mutmut's verdict files and the equivalents list."""

from __future__ import annotations

import importlib.util
import json
from collections import Counter
from pathlib import Path
from types import ModuleType

import pytest

TOOL = Path(__file__).resolve().parents[1] / "tools" / "mutation_score.py"


@pytest.fixture
def tool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    spec = importlib.util.spec_from_file_location("mutation_score", TOOL)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    monkeypatch.setattr(module, "ROOT", tmp_path)
    monkeypatch.setattr(module, "META", tmp_path / "mutants" / "webhook" / "core")
    monkeypatch.setattr(module, "EQUIVALENT", tmp_path / "tools" / "equivalent-mutants.txt")
    (tmp_path / "tools").mkdir()
    return module


def _verdicts(root: Path, module: str, codes: dict[str, int | None]) -> None:
    meta = root / "mutants" / "webhook" / "core" / f"{module}.py.meta"
    meta.parent.mkdir(parents=True, exist_ok=True)
    meta.write_text(json.dumps({"exit_code_by_key": codes}))


def test_the_score_leaves_out_equivalents_and_unrun_mutants(
    tool: ModuleType, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # mutmut's exit codes: 1 killed, 0 survived, 36 timeout, 33 no tests, None not run yet.
    codes = {"m.x_f__mutmut_1": 1, "m.x_f__mutmut_2": 0, "m.x_f__mutmut_3": 0, "m.x_f__mutmut_4": 36}
    _verdicts(tmp_path, "resolve", codes | {"m.x_f__mutmut_5": None, "m.x_f__mutmut_6": 33})
    (tmp_path / "tools" / "equivalent-mutants.txt").write_text(
        "# comment\n\nm.x_f__mutmut_3 behaves alike\nm.x_f__mutmut_1 listed but killed\n"
    )
    assert tool.equivalents() == {"m.x_f__mutmut_3": "behaves alike", "m.x_f__mutmut_1": "listed but killed"}
    assert tool.main(["resolve"]) == 0
    out = capsys.readouterr().out.splitlines()
    # 6 mutants: 1 killed + 1 timeout caught, of 6 - 1 unrun - 1 equivalent = 4 scored.
    assert out[1].split() == ["resolve", "6", "1", "1", "2", "1", "1", "1", "50.0%"]
    assert out[2].split() == ["all", "6", "1", "1", "2", "1", "1", "1", "50.0%"]
    assert "  m.x_f__mutmut_2" in out
    assert "  m.x_f__mutmut_6" in out
    assert "  m.x_f__mutmut_3" not in out
    assert out[-1] == "  m.x_f__mutmut_1"  # listed as equivalent, but killed: to remove from the list


def test_nothing_to_score_is_an_error(tool: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    (tool.EQUIVALENT).write_text("")
    assert tool.main(["resolve"]) == 1
    assert "run `make mutate` first" in capsys.readouterr().err
    assert tool._row("x", Counter(), 0).split()[-1] == "-"
