"""``gossip train`` and ``gossip reproduce training-figure`` end to end; bad input named."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from continuized.cli.app import app

runner = CliRunner()


def _run(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args))
    return result.exit_code, result.output


def test_train_writes_png_csv_and_json(tmp_path: Path) -> None:
    png, table, summary = tmp_path / "out" / "t.png", tmp_path / "t.csv", tmp_path / "t.json"
    code, out = _run(
        "train",
        "--graph", "cycle:6",
        "--model", "mlp:8",
        "--data", "iris",
        "--split", "dirichlet:0.5:1",
        "--algorithm", "a2cid2",
        "--algorithm", "adpsgd",
        "--algorithm", "allreduce",
        "--runs", "2",
        "--t-end", "30",
        "--grid-points", "7",
        "--lr", "0.1",
        "--dtype", "float32",
        "--target-accuracy", "0.6",
        "--no-progress",
        "--plot", str(png),
        "--csv", str(table),
        "--json", str(summary),
    )  # fmt: skip
    assert code == 0, out
    for word in ("iris", "Dirichlet(0.5)", "MLP 4-8-3", "float32", "eta", "alpha~", "a2cid2"):
        assert word in out, word
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = list(csv.DictReader(table.open()))
    assert len(rows) == 7
    assert float(rows[-1]["t"]) == 30.0
    assert {"a2cid2_accuracy_q50", "adpsgd_consensus_q95", "allreduce_loss_q05"} <= set(rows[0])
    data = json.loads(summary.read_text())
    assert set(data["algorithms"]) == {"a2cid2", "adpsgd", "allreduce"}
    assert data["constants"]["eta"] == pytest.approx(data["algorithms"]["a2cid2"]["params"]["eta"])
    acid = data["algorithms"]["a2cid2"]
    # The JSON's final figures are the CSV's last row.
    assert acid["final"]["accuracy"]["median"] == pytest.approx(
        float(rows[-1]["a2cid2_accuracy_q50"])
    )
    reach = acid["t_to_accuracy"]
    assert reach["target"] == 0.6
    assert len(reach["runs"]) == 2
    # t to target is the first grid time at which a run's test accuracy reaches it.
    if reach["median"] is not None:
        assert reach["median"] in {float(r["t"]) for r in rows} | {
            float(np.median([t for t in reach["runs"] if t is not None]))
        }
    assert data["algorithms"]["allreduce"]["final"]["consensus"]["median"] == 0.0


def test_user_model_without_accuracy_is_unknown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = tmp_path / "plain_model.py"
    module.write_text(
        "import numpy as np\n"
        "def make(features, classes, seed):\n"
        "    def loss_and_grad(params, batch):\n"
        "        return float(np.sum(params ** 2)), 2 * params\n"
        "    return np.ones(3), loss_and_grad\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    summary = tmp_path / "s.json"
    code, out = _run(
        "train", "--graph", "cycle:3", "--model", "plain_model:make", "--data", "iris",
        "--runs", "1", "--t-end", "5", "--grid-points", "3", "--no-progress",
        "--json", str(summary),
    )  # fmt: skip
    assert code == 0, out
    assert "unknown" in out
    data = json.loads(summary.read_text())
    assert data["algorithms"]["a2cid2"]["final"]["accuracy"]["median"] is None
    assert data["algorithms"]["a2cid2"]["final"]["loss"]["median"] < 3.0


def test_reproduce_training_figure_quick(tmp_path: Path) -> None:
    code, out = _run(
        "reproduce", "training-figure", "--out", str(tmp_path), "--runs", "1",
        "--t-end", "2", "--grid-points", "2", "--no-progress",
    )  # fmt: skip
    assert code == 0, out
    for name in ("training-accuracy.png", "training-consensus.png"):
        assert (tmp_path / name).read_bytes()[:4] == b"\x89PNG"
    summary = json.loads((tmp_path / "training-figure.json").read_text())
    assert len(summary["panels"]) == 6
    for panel in summary["panels"].values():
        assert set(panel["algorithms"]) == {"a2cid2", "adpsgd", "local", "allreduce"}
    assert len(list(tmp_path.glob("training-*.csv"))) == 6
    assert "complete:16" in out


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--model", "cnn"], ["cnn", "valid models"]),
        (["--data", "diabetes"], ["class labels"]),
        (["--data", "synthetic:0:50x3"], ["class labels"]),
        (["--split", "dirichlet:-1:0"], ["ALPHA"]),
        (["--algorithm", "adam"], ["adam", "a2cid2, adpsgd, local, allreduce"]),
        (["--algorithm", "local", "--algorithm", "local"], ["twice"]),
        (["--graph", "ring:5"], ["ring"]),
        (["--runs", "0"], ["--runs", "0"]),
        (["--rate-com", "0"], ["communication rate"]),
        (["--lr", "-1"], ["--lr"]),
        (["--momentum", "1"], ["--momentum"]),
        (["--batch-size", "0"], ["--batch-size"]),
        (["--dtype", "int8"], ["float32 or float64"]),
        (["--init", "zeros"], ["--init"]),
        (["--t-end", "nan"], ["--t-end", "nan"]),
        (["--plot", "x.gif"], ["x.gif", ".png"]),
        (["--consensus-eps", "0"], ["--consensus-eps", "> 0"]),
        (
            ["--model", "examples.linear_svm_model:make", "--init", "per-node"],
            ["--init per-node", "takes no rng", "--init common"],
        ),
        (["--data", "npz:README.md"], ["README.md", "not an .npz", "'X'", "'y'"]),
    ],
)
def test_bad_input_is_named(args: list[str], words: list[str]) -> None:
    code, out = _run(
        "train", "--graph", "cycle:4", "--data", "iris", "--runs", "1", "--t-end", "2", *args
    )
    assert code == 2, out
    assert "error" in out.lower()
    for word in words:
        assert word in out, (word, out)


def test_train_reports_the_t_to_its_consensus_threshold_or_never(tmp_path: Path) -> None:
    summary = tmp_path / "t.json"
    code, out = _run(
        "train", "--graph", "cycle:4", "--model", "softmax", "--data", "iris",
        "--algorithm", "a2cid2", "--algorithm", "local", "--init", "per-node", "--lr", "0",
        "--runs", "2", "--t-end", "20", "--grid-points", "11", "--consensus-eps", "1e-3",
        "--no-progress", "--json", str(summary),
    )  # fmt: skip
    assert code == 0, out
    assert "cons. <= 0.001" in " ".join(out.split())
    algorithms = json.loads(summary.read_text())["algorithms"]
    reach = algorithms["a2cid2"]["t_to_consensus"]
    assert reach["eps"] == 1e-3
    assert reach["median"] is not None
    assert 0 < reach["median"] <= 20
    assert all(t is not None for t in reach["runs"])
    # Without communication the per-node starts never meet: not reached, no number made up.
    assert algorithms["local"]["t_to_consensus"]["median"] is None
    assert algorithms["local"]["t_to_consensus"]["runs"] == [None, None]
    assert algorithms["local"]["diverged_runs"] == []


def test_a_diverging_train_is_called_diverged_and_exits_1(tmp_path: Path) -> None:
    summary = tmp_path / "t.json"
    code, out = _run(
        "train", "--graph", "cycle:4", "--model", "mlp:8", "--data", "digits",
        "--algorithm", "adpsgd", "--lr", "1e6", "--runs", "1", "--t-end", "4",
        "--grid-points", "3", "--no-progress", "--json", str(summary),
    )  # fmt: skip
    assert code == 1, out
    assert "diverged" in out
    assert "error: diverged: adpsgd (1 of 1 runs)" in " ".join(out.split())
    data = json.loads(summary.read_text())  # the summary is still written
    assert data["diverged"] is True
    assert data["algorithms"]["adpsgd"]["diverged_runs"] == [0]
