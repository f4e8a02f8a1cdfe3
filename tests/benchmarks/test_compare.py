"""scripts/bench-compare's verdicts (benchmarks/compare.py): the ratio's direction, the spread,
the flag, and the command line each tree is run with."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _compare() -> ModuleType:
    spec = importlib.util.spec_from_file_location("compare", ROOT / "benchmarks" / "compare.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["compare"] = module
    spec.loader.exec_module(module)
    return module


compare = _compare()
BASE = compare.Tree("base", ROOT)
HEAD = compare.Tree("head", ROOT)
LOWER = compare.Figure("rtt", "round trip", "ms")
HIGHER = compare.Figure("rate", "rate", "/s", lower_is_better=False)
CASE = compare.Case("live", lambda tree: {}, (LOWER, HIGHER))


def _rows(base: dict[str, list[float]], head: dict[str, list[float]]) -> list[dict[str, object]]:
    samples = {("live", k, "base"): v for k, v in base.items()}
    samples |= {("live", k, "head"): v for k, v in head.items()}
    return compare.verdicts([CASE], samples, (BASE, HEAD), 0.15)


def test_a_loss_past_the_tolerance_and_the_noise_is_flagged_either_way_the_figure_goes() -> None:
    rtt, rate = _rows({"rtt": [1.0, 1.0, 1.0], "rate": [3000.0] * 3},
                      {"rtt": [2.0, 2.0, 2.0], "rate": [1500.0] * 3})  # fmt: skip
    assert rtt["ratio"] == pytest.approx(2.0)
    assert rtt["worse"]
    assert rate["ratio"] == pytest.approx(2.0)
    assert rate["worse"]


def test_a_gain_or_a_loss_within_the_tolerance_is_not_flagged() -> None:
    rtt, rate = _rows({"rtt": [1.0] * 3, "rate": [3000.0] * 3},
                      {"rtt": [1.1] * 3, "rate": [6000.0] * 3})  # fmt: skip
    assert rtt["ratio"] == pytest.approx(1.1)
    assert not rtt["worse"]
    assert rate["ratio"] == pytest.approx(0.5)
    assert not rate["worse"]


def test_a_loss_the_run_to_run_spread_explains_is_not_flagged() -> None:
    (rtt,) = _rows({"rtt": [1.0, 1.0, 1.0]}, {"rtt": [0.5, 1.3, 2.1]})[:1]
    assert rtt["ratio"] == pytest.approx(1.3)
    assert rtt["spread"] == pytest.approx(0.8 / 1.3)
    assert not rtt["worse"]


def test_a_figure_one_tree_could_not_measure_has_no_ratio() -> None:
    rtt, rate = _rows({"rtt": [1.0]}, {})
    assert rtt["head"] is None
    assert rtt["ratio"] is None
    assert not rtt["worse"]
    assert rate["base"] is None
    assert rate["ratio"] is None


def test_a_tree_runs_its_own_console_script_with_its_code_first_on_the_path() -> None:
    argv = compare.console_script(ROOT)
    done = subprocess.run(
        [*argv, "--help"], env=BASE.env(), capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0, done.stderr
    assert "simulate" in done.stdout
    assert BASE.env()["PYTHONPATH"].split(":")[0] == str(ROOT)


def test_the_command_line_refuses_an_unknown_case_naming_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(SystemExit) as stop:
        compare.main(["HEAD", "--cases", "live,warp"])
    assert stop.value.code == 2
    assert "'live,warp'" in capsys.readouterr().err
