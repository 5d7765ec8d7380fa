"""``report --published``: every strategy per size, in numeric order, from the records of real
runs on a real 2-worker LocalCluster; the per-size sentence (which strategy won and why, and
only where the repeats show it) on hand-made rows whose numbers are worked out by hand."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from sdnn_dask import study
from sdnn_dask.report import published
from sdnn_dask.study import RunSpec

SPECS = [RunSpec("kernel"), RunSpec("data", "hash"), RunSpec("model", "hash"),
         RunSpec("model", "hypergraph"), RunSpec("hybrid", "hash", row_groups=2)]


@pytest.fixture(scope="module")
def ran(client):
    """Two sizes, 1024-12 then 1024-6 (text order: "12" before "6"), 300 inputs each, every
    strategy twice: ``(runs, layers)``."""
    pytest.importorskip("mtkahypar")
    runs, layers = [], []
    for n_layers in (12, 6):
        problem = study.load_problem(neurons=1024, layers=n_layers, inputs=300, seed=1)
        found = study.compare(problem, client, specs=SPECS, repeat=2, study="published",
                              progress=False)
        assert found.failed.empty
        runs.append(found.runs)
        layers.append(found.layers)
    return pd.concat(runs, ignore_index=True), pd.concat(layers, ignore_index=True)


def _same(a, b):
    return (np.isnan(a) and np.isnan(b)) or a == pytest.approx(b)


def test_every_strategy_per_size_in_numeric_order(ran):
    runs, layers = ran
    table = published.beside_published(runs, layers)
    assert list(dict.fromkeys(zip(table["layers"], table["inputs"], strict=True))) == [
        (6, 300), (12, 300)]
    for _, rows in table.groupby("layers", sort=False):
        assert list(zip(rows["strategy"], rows["partition"], strict=True)) == [
            ("kernel", "none"), ("data", "hash"), ("model", "hash"),
            ("model", "hypergraph"), ("hybrid", "hash")]
    assert (table["repeats"] == 2).all()
    assert table[published.SYSTEMS].isna().all().all()  # 300 inputs: nothing published
    per_run = runs.drop_duplicates("run_id")
    for _, row in table.iterrows():
        mine = per_run[(per_run["layers"] == row["layers"])
                       & (per_run["strategy"] == row["strategy"])
                       & (per_run["partition"] == row["partition"])]
        assert len(mine) == 2
        assert row["seconds"] == pytest.approx(mine["wall_s"].median())
        assert (row["seconds_min"], row["seconds_max"]) == (mine["wall_s"].min(),
                                                            mine["wall_s"].max())
        blocks = runs[runs["run_id"].isin(mine["run_id"])]
        busiest = blocks.groupby("run_id")["compute_s"].max().median()
        assert row["compute_s"] == pytest.approx(busiest)
        if row["strategy"] in ("model", "hybrid"):
            assert row["mb_moved"] == pytest.approx(mine["bytes_moved"].median() / 1e6)
            assert row["mb_moved"] > 0
            # the most waiting part's seconds waiting, over the layers, median of the runs
            waits = layers[layers["run_id"].isin(mine["run_id"])].groupby(
                ["run_id", "block"])["wait_s"].sum().groupby("run_id").max()
            assert row["wait_s"] == pytest.approx(waits.median())
        else:
            assert row["mb_moved"] == 0.0 and np.isnan(row["wait_s"])
        peak = blocks.groupby("run_id")["peak_rss_bytes"].max().max() / 1e9
        assert _same(row["peak_gb"], peak)


def test_the_peak_is_the_largest_worker_of_the_largest_repeat(ran):
    runs, _ = ran
    # what each worker's records say: one number per (run, block), known by hand
    mine = runs.copy()
    data = (mine["strategy"] == "data") & (mine["layers"] == 6)
    ids = list(dict.fromkeys(mine.loc[data, "run_id"]))
    peaks = {(ids[0], 0): 1e9, (ids[0], 1): 3e9, (ids[1], 0): 2e9, (ids[1], 1): np.nan}
    mine.loc[data, "peak_rss_bytes"] = [peaks[(r, int(b))] for r, b in
                                        zip(mine.loc[data, "run_id"], mine.loc[data, "block"],
                                            strict=True)]
    mine.loc[~data, "peak_rss_bytes"] = np.nan
    table = published.beside_published(mine)
    got = table.set_index(["layers", "strategy", "partition"])["peak_gb"]
    assert got[(6, "data", "hash")] == 3.0
    assert got.drop((6, "data", "hash")).isna().all()  # NaN: not recorded
    text = published.format_published(table, mine)
    assert "3.00" in text.split("1024-6 x 300")[1].split("1024-12 x 300")[0]


def test_the_text_has_a_block_and_a_sentence_per_size(ran):
    runs, layers = ran
    table = published.beside_published(runs, layers)
    text = published.format_published(table, runs)
    assert text.index("1024-6 x 300: published none") < text.index("1024-12 x 300")
    said = dict(published.sentences(table, runs))
    assert list(said) == [(1024, 6, 300), (1024, 12, 300)]
    for key, sentence in said.items():
        assert sentence in text
        rows = table[table["layers"] == key[1]]
        found = published.size_verdict(rows)
        if found.kind == "fastest":
            assert " won, " in sentence
        elif found.kind == "noise":
            assert "are within noise" in sentence and " won" not in sentence
    lines = text.splitlines()
    for row in ("serial kernel", "data (hash, 2 workers)", "model (hash, k=2, direct",
                "model (hypergraph, k=2, direct", "hybrid (hash, 2 row groups"):
        assert sum(line.startswith(row) for line in lines) == 2  # a row per size


# --------------------------------------------------------------------------- the sentence

def _row(strategy, seconds, compute, *, spread=0.01, repeats=3, mb=0.0, wait=np.nan,
         weights="", partition="hash"):
    """A row of the published table: ``seconds`` the median, +-``spread`` its range."""
    return {"neurons": 1024, "layers": 120, "inputs": 60000, "network": "n",
            "strategy": strategy, "partition": "none" if strategy == "kernel" else partition,
            "row_partition": "", "transport": "direct" if strategy in ("model", "hybrid")
            else "", "workers": 1 if strategy == "kernel" else 2,
            "blocks": 4 if strategy == "hybrid" else 1 if strategy == "kernel" else 2,
            "parts": 2 if strategy in ("model", "hybrid") else 1,
            "row_groups": 2 if strategy in ("hybrid", "data") else 1, "weights": weights,
            "dedup": "on", "repeats": repeats, "seconds": seconds,
            "seconds_min": seconds - spread, "seconds_max": seconds + spread,
            "edges_per_s": 1e12, "compute_s": compute, "mb_moved": mb, "wait_s": wait,
            "peak_gb": np.nan}


def _rows(*rows):
    return pd.DataFrame(list(rows))


def test_a_win_by_compute():
    said = published.size_sentence(_rows(_row("kernel", 1.0, 0.98), _row("data", 0.6, 0.5)))
    assert said == ("Data parallelism (hash, 2 workers) won, 0.590-0.610 s against the "
                    "serial kernel's 0.990-1.01 s over 3 repeats: compute (its busiest block "
                    "computed for 0.500 s against 0.980 s).")


def test_a_win_by_communication():
    # model: compute 0.3 s (less than data's 0.5), but 0.9 s outside it: waiting for pieces
    said = published.size_sentence(_rows(
        _row("data", 0.6, 0.5), _row("model", 1.2, 0.3, mb=431.7, wait=0.8)))
    assert said == ("Data parallelism (hash, 2 workers) won, 0.590-0.610 s against model "
                    "parallelism (hash, k=2, direct, 2 workers)'s 1.19-1.21 s over 3 repeats: "
                    "communication (model parallelism (hash, k=2, direct, 2 workers): 0.900 s "
                    "outside its kernel against 0.100 s, moving 431.7 MB against 0 MB, its "
                    "parts waiting up to 0.800 s for pieces).")


def test_a_win_by_memory_and_a_strategy_that_did_not_run():
    said = published.size_sentence(
        _rows(_row("kernel", 27.0, 26.9, spread=0.2),
              _row("data", 28.5, 26.0, spread=0.2, weights="streamed")),
        {"model": "did not run", "hybrid": "failed its check"})
    assert said == ("The serial kernel won, 26.8-27.2 s against data parallelism (hash, 2 "
                    "workers)'s 28.3-28.7 s over 3 repeats: memory (data parallelism (hash, "
                    "2 workers) streamed its weights from the store, the serial kernel held "
                    "them); memory: model parallelism did not run at this size; the hybrid "
                    "failed its check at this size.")


def test_no_winner_within_noise_or_on_one_repeat():
    close = _rows(_row("data", 0.23, 0.2, spread=0.02), _row("model", 0.245, 0.1, spread=0.025),
                  _row("kernel", 1.0, 0.98))
    said = published.size_sentence(close)
    assert said == ("Data parallelism (hash, 2 workers) and model parallelism (hash, k=2, "
                    "direct, 2 workers) are within noise: 0.210-0.250 s against 0.220-0.270 s "
                    "over 3 repeats.")
    once = published.size_sentence(_rows(_row("kernel", 1.0, 0.98, repeats=1),
                                         _row("data", 0.6, 0.5, repeats=1)))
    assert once == ("One repeat: no spread to compare; run with --repeat 3 (least seconds: "
                    "data parallelism (hash, 2 workers), 0.600 s, against the serial kernel, "
                    "1.00 s).")
    assert " won" not in said + once


def test_each_strategy_stands_by_its_best_configuration():
    # model hash and hypergraph overlap each other, but the strategy, model, is clear of data
    rows = _rows(_row("data", 1.0, 0.9), _row("model", 0.5, 0.45, partition="hash"),
                 _row("model", 0.51, 0.45, partition="hypergraph"))
    said = published.size_sentence(rows)
    assert said.startswith("Model parallelism (hash, k=2, direct, 2 workers) won, "
                           "0.490-0.510 s against data parallelism")


def test_a_strategy_that_failed_everywhere_is_still_missed():
    # model parallelism ran at this size and failed; it passed nowhere else either
    table = _rows(_row("kernel", 1.0, 0.98), _row("data", 0.6, 0.5))
    records = pd.DataFrame({"run_id": ["k", "d", "m"], "strategy": ["kernel", "data", "model"],
                            "neurons": 1024, "layers": 120, "inputs": 60000})
    [(key, said)] = published.sentences(table, records)
    assert key == (1024, 120, 60000)
    assert said.endswith("; model parallelism failed its check at this size.")
    [(_, said)] = published.sentences(table)  # without the records: nothing to miss
    assert said.endswith("0.980 s).")
