"""The HTML report: built from real records of a tiny study, checked by hand-worked numbers
on hand-made records, and rendered in a real headless browser."""

from __future__ import annotations

import base64
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from sdnn_dask import records, report
from sdnn_dask.records import RUN_DTYPES, typed
from sdnn_dask.report import html as html_report

NETWORKS = ((1024, 12), (1024, 6))
INPUTS = 600


# --------------------------------------------------------------------------- real records

@pytest.fixture(scope="module")
def study():
    """Records of a real tiny study on a real 2-worker LocalCluster, two networks.

    Per network: serial reference and kernel; data parallelism with block and hash rows on
    1 and 2 workers; model parallelism (block, random neurons, direct transport); the
    hybrid with 2 row groups. Returns ``(runs, layers, results)``, ``results`` keyed by
    ``(layers, label)``.
    """
    from sdnn_dask.cluster import local_client
    from sdnn_dask.data.images import make_inputs
    from sdnn_dask.data.radixnet import make_network
    from sdnn_dask.parallel import DataParallelExecutor, ModelParallelExecutor, run_serial

    runs, layers, results = [], [], {}

    def record(key, result):
        results[key] = result
        runs.append(records.run_records(result, study="t", check="PASS"))
        layers.append(records.layer_records(result, study="t"))

    with local_client(2) as client:
        first = sorted(client.nthreads())[0]
        for neurons, n_layers in NETWORKS:
            net = make_network(neurons, n_layers)
            y = make_inputs(INPUTS, neurons)
            for method in ("reference", "kernel"):
                record((n_layers, method), run_serial(net, y, method))
            for workers, pool in ((1, [first]), (2, None)):
                executor = DataParallelExecutor(client, net, workers=pool)
                for partition in ("block", "hash"):
                    record((n_layers, f"data-{partition}-{workers}"),
                           executor.run(y, partition=partition))
            model = ModelParallelExecutor(client, net)
            for partition in ("block", "random"):
                record((n_layers, f"model-{partition}"),
                       model.run(y, partition=partition, transport="direct"))
            record((n_layers, "hybrid"),
                   model.run(y, partition="block", row_groups=2, transport="direct"))
    return (pd.concat(runs, ignore_index=True), pd.concat(layers, ignore_index=True),
            results)


def test_comparison_is_per_network(study):
    runs, _, results = study
    cmp = report.comparison(runs)
    assert len(cmp) == 18 and cmp["network"].nunique() == 2
    for n_layers in (12, 6):
        mine = cmp[cmp["network"] == f"radixnet-1024-{n_layers}-s0"].set_index(
            ["strategy", "partition", "workers", "row_groups"])
        ref = results[(n_layers, "reference")].wall_seconds
        kernel = results[(n_layers, "kernel")].wall_seconds
        hash2 = results[(n_layers, "data-hash-2")].wall_seconds
        block2 = results[(n_layers, "data-block-2")].wall_seconds
        model = results[(n_layers, "model-block")].wall_seconds
        row = mine.loc[("model", "block", 2, 1)]
        assert row["speedup"] == pytest.approx(ref / model)  # this network's reference
        assert row["vs_kernel"] == pytest.approx(kernel / model)
        assert row["vs_data"] == pytest.approx(min(hash2, block2) / model)
        assert row["mb_moved"] == pytest.approx(
            results[(n_layers, "model-block")].bytes_moved / 1e6)
        one = min(results[(n_layers, f"data-{p}-1")].wall_seconds for p in ("block", "hash"))
        assert mine.loc[("kernel", "none", 1, 1), "vs_data"] == pytest.approx(one / kernel)
    # the reader's order: serial, data, model, hybrid
    order = cmp[cmp["network"] == "radixnet-1024-12-s0"]["strategy"].tolist()
    assert order == ["reference", "kernel"] + ["data"] * 4 + ["model"] * 2 + ["hybrid"]


def test_layer_tables_from_real_records(study):
    runs, layers, results = study
    profile = report.layer_profile(runs, layers)
    for n_layers in (12, 6):
        mine = profile[profile["network"] == f"radixnet-1024-{n_layers}-s0"]
        kernel = results[(n_layers, "kernel")].layers
        assert (mine["source"] == "kernel").all()
        assert mine["rows_out"].tolist() == kernel["rows_out"].tolist()
        assert mine["nnz_out"].tolist() == kernel["nnz_out"].tolist()
        assert mine["layer"].tolist() == list(range(1, n_layers + 1))
    blocks = report.block_times(runs)
    assert set(blocks["workers"]) == {2}  # runs of one block have nothing to balance
    data = blocks[(blocks["strategy"] == "data") & (blocks["network"] == "radixnet-1024-6-s0")]
    assert sorted(data["partition"]) == ["block", "block", "hash", "hash"]
    hashed = results[(6, "data-hash-2")].blocks["compute_s"].tolist()
    assert data[data["partition"] == "hash"]["compute_s"].tolist() == pytest.approx(hashed)
    times = report.layer_times(runs, layers)
    model = results[(12, "model-random")].layers
    mine = times[(times["network"] == "radixnet-1024-12-s0") & (times["strategy"] == "model")
                 & (times["partition"] == "random")]
    expected = model.groupby("layer")["wait_s"].mean()
    assert mine["wait_s"].tolist() == pytest.approx(expected.tolist())
    assert len(times[times["strategy"] == "hybrid"]) == 12 + 6


def test_real_communication_series_collapse_exactly_the_identical(study):
    runs, layers, results = study
    series = report.communication_series(report.communication(runs, layers))
    for n_layers in (12, 6):
        per_layer = {p: results[(n_layers, f"model-{p}")].layers.groupby("layer")["bytes_in"]
                     .sum().to_numpy() for p in ("block", "random")}
        mine = series[(series["network"] == f"radixnet-1024-{n_layers}-s0")
                      & (series["strategy"] == "model")]
        labels = set(mine["series"])
        if np.array_equal(per_layer["block"], per_layer["random"]):
            assert labels == {"block = random"}
        else:
            assert labels == {"block", "random"}
        assert len(mine) == n_layers * len(labels)


def test_write_report_from_real_records(study, tmp_path):
    pytest.importorskip("matplotlib")
    runs, layers, _ = study
    folder = tmp_path / "out"
    records.write_run(folder, "all", runs, layers)  # read back as the CLI would
    runs, layers = records.read_records(folder), records.read_records(folder, "layers")
    written = html_report.write_report(folder, runs, layers, title="tiny study")
    names = [p.name for p in written]
    assert names[-2:] == ["summary.md", "report.html"]
    for stem in ("rate", "blocks", "survivors", "distinct-rows", "layer-time",
                 "communication"):
        for net in ("radixnet-1024-12-s0-600", "radixnet-1024-6-s0-600"):
            assert f"{stem}-{net}.png" in names
    assert all(p.is_file() and p.parent == folder for p in written)
    assert not list(folder.glob(".*.tmp"))  # atomic writes leave nothing behind
    page = (folder / "report.html").read_text()
    embedded = re.findall(r'src="data:image/png;base64,([^"]+)"', page)
    assert len(embedded) == 12
    files = {(folder / n).read_bytes() for n in names if n.endswith(".png")}
    assert {base64.b64decode(e) for e in embedded} == files
    assert page.count('<table class="comparison">') == 2
    assert "radixnet-1024-12-s0, 600 inputs" in page and "radixnet-1024-6-s0" in page
    summary = (folder / "summary.md").read_text()
    assert "| data | hash |" in summary and "(rate-radixnet-1024-6-s0-600.png)" in summary
    # sizes in numeric order: 6 layers before 12 (as text, "12" sorts first)
    assert summary.index("## `radixnet-1024-6-s0`") < summary.index("## `radixnet-1024-12-s0`")


# --------------------------------------------------------------------------- hand-made

def _run(strategy, partition, wall, *, network="A", workers=1, blocks=None, parts=1,
         groups=None, transport="", check="PASS", bytes_moved=None, study="s", time="t1",
         compute=None):
    blocks = blocks or workers
    compute = compute or [wall] * blocks
    return pd.DataFrame({
        "study": study, "run_id": f"{study}-{network}-{strategy}-{partition}-{workers}-{wall}",
        "time": time, "host": "h", "strategy": strategy, "partition": partition,
        "network": network, "neurons": 1024, "layers": 120, "edges": 1000, "inputs": 10,
        "workers": workers, "blocks": blocks, "parts": parts,
        "row_groups": groups if groups is not None else (blocks if strategy == "data" else 1),
        "transport": transport, "block": range(blocks), "worker": "w", "rows": 5,
        "survivors": 1, "compute_s": compute, "wall_s": wall,
        "edges_per_s": 10 * 1000 / wall, "imbalance": max(compute) / np.mean(compute),
        "survivor_imbalance": 1.0, "bytes_moved": bytes_moved, "check": check,
        "check_against": "reference", "max_abs_diff": 0.0,
    })


def _hand_made(fail=False):
    """Two networks; A's numbers are worked out by hand in the tests."""
    return typed(pd.concat([
        _run("reference", "none", 100.0, study="old", time="t0"),  # an older study
        _run("reference", "none", 10.0),
        _run("kernel", "none", 4.0),
        _run("data", "hash", 6.0),
        _run("data", "hash", 2.0, workers=2),
        _run("data", "hash", 3.0, workers=2),  # a repeat: median 2.5
        _run("data", "block", 1.0 if fail else 5.0, workers=2,
             check="FAIL" if fail else "PASS", compute=[0.5, 1.5]),
        _run("model", "block", 5.0, workers=2, blocks=2, parts=2, transport="direct",
             bytes_moved=1e8),
        _run("model", "hash", 8.0, workers=4, blocks=4, parts=4, transport="direct",
             bytes_moved=2e8),
        _run("reference", "none", 20.0, network="B"),
        _run("kernel", "none", 5.0, network="B"),
        _run("data", "hash", 4.0, network="B", workers=2),
    ], ignore_index=True), RUN_DTYPES)


def test_speedups_and_vs_data_by_hand():
    cmp = report.comparison(_hand_made()).set_index(["network", "strategy", "partition",
                                                     "workers"])
    assert "old" not in set(report.latest_runs(_hand_made())["study"])
    hash2 = cmp.loc[("A", "data", "hash", 2)]
    assert hash2["repeats"] == 2 and hash2["seconds"] == 2.5
    assert hash2["speedup"] == 4.0 and hash2["vs_kernel"] == 1.6 and hash2["vs_data"] == 1.0
    assert cmp.loc[("A", "data", "block", 2), "vs_data"] == 0.5  # 2.5 / 5
    model = cmp.loc[("A", "model", "block", 2)]
    assert (model["speedup"], model["vs_kernel"], model["vs_data"]) == (2.0, 0.8, 0.5)
    assert model["mb_moved"] == 100.0
    assert np.isnan(cmp.loc[("A", "model", "hash", 4), "vs_data"])  # no data run on 4
    # serial runs are compared with data parallelism on one worker
    assert cmp.loc[("A", "kernel", "none", 1), "vs_data"] == 1.5  # 6 / 4
    # network B against its own reference and kernel, not A's
    b = cmp.loc[("B", "data", "hash", 2)]
    assert (b["speedup"], b["vs_kernel"]) == (5.0, 1.25)


def test_headline_by_hand():
    cmp = report.comparison(_hand_made())
    a = cmp[cmp["network"] == "A"]
    # the kernel, the runner-up, ran once: no spread, so nothing is called fastest
    assert report.headline(a) == (
        "One repeat: no spread to compare; run with --repeat 3. Least seconds: data "
        "parallelism (hash, 2 workers), 4.17e+03 edges/s, 1.60x the serial kernel. Model "
        "parallelism at best (block, k=2, direct, 2 workers) reaches 0.80x the serial "
        "kernel and 0.50x data parallelism on 2 workers, moving 100.0 MB over 120 layers.")
    b = cmp[cmp["network"] == "B"]
    assert report.headline(b).startswith(
        "One repeat: no spread to compare; run with --repeat 3. Least seconds: data "
        "parallelism (hash, 2 workers), 2.5e+03 edges/s, 1.25x the serial kernel.")
    serial = report.headline(a[a["strategy"].isin(["reference", "kernel"])])
    assert serial == ("One repeat: no spread to compare; run with --repeat 3. Least seconds: "
                      "the serial kernel, 2.5e+03 edges/s.")
    # two repeats each, model parallelism's 2.9-3.1 s clear of the kernel's 3.9-4.1 s
    model_first = report.comparison(typed(pd.concat([
        _run("kernel", "none", 3.9), _run("kernel", "none", 4.1),
        _run("data", "hash", 5.9, workers=2), _run("data", "hash", 6.1, workers=2),
        *(_run("model", "block", w, workers=2, blocks=2, parts=2, transport="direct",
               bytes_moved=1e8) for w in (2.9, 3.1))]), RUN_DTYPES))
    assert report.headline(model_first) == (
        "Model parallelism (block, k=2, direct, 2 workers) is fastest: 3.34e+03 edges/s, "
        "1.33x the serial kernel and 2.00x data parallelism on 2 workers, moving 100.0 MB "
        "over 120 layers; its repeats 2.90-3.10 s, the runner-up's (the serial kernel) "
        "3.90-4.10 s. Data parallelism at best (hash, 2 workers) reaches 0.67x the "
        "serial kernel.")


def test_failures_come_first_and_are_never_fastest():
    runs = _hand_made(fail=True)
    cmp = report.comparison(runs)
    text = report.headline(cmp[cmp["network"] == "A"])
    assert text.startswith("1 of 7 configurations FAILED the check: data (block, "
                           "2 workers).")
    assert "Least seconds: data parallelism (hash, 2 workers)" in text  # not the failed 1.0 s
    # nor the baseline of the data-parallel ratio
    model = cmp[(cmp["network"] == "A") & (cmp["strategy"] == "model") & (cmp["workers"] == 2)]
    assert model["vs_data"].tolist() == [0.5]
    assert "0.50x data parallelism on 2 workers" in text
    pytest.importorskip("matplotlib")
    page = html_report.html_report(runs, pd.DataFrame())
    top = page.index('class="failures"')
    assert top < page.index('<section id="net-A-10">') < page.index('<section id="net-B-10">')
    assert "1 run(s) FAILED the check" in page[top:top + 200]
    assert page.count('<td class="check fail">FAIL</td>') == 1
    assert "All " not in page[:top]
    summary = report.summary_markdown(runs)
    assert summary.index("FAILED") < summary.index("## `A`")
    passing = html_report.html_report(_hand_made(), pd.DataFrame())
    assert 'class="failures"' not in passing and "All 11 runs PASS the check." in passing


def _model_layers(bytes_by_partition):
    """Run records (model, k=2, 2 workers) and their layer records, bytes given per layer."""
    runs, layers = [], []
    for partition, per_layer in bytes_by_partition.items():
        run = _run("model", partition, 1.0, workers=2, blocks=2, parts=2,
                   transport="direct", bytes_moved=sum(per_layer))
        runs.append(run)
        for layer, b in enumerate(per_layer, start=1):
            for block in (0, 1):
                layers.append({"run_id": run["run_id"].iloc[0], "block": block,
                               "layer": layer, "bytes_in": b / 2, "columns_in": 4.0,
                               "seconds": 0.1, "wait_s": 0.2, "send_s": 0.01,
                               "deserialise_s": 0.001})
    return pd.concat(runs, ignore_index=True), pd.DataFrame(layers)


def test_identical_communication_series_are_collapsed():
    same = [4e6, 2e6, 1e6]
    runs, layers = _model_layers({"block": same, "hash": same, "random": same,
                                  "hypergraph": [1e6, 1e6, 5e5]})
    series = report.communication_series(report.communication(runs, layers))
    assert list(dict.fromkeys(series["series"])) == ["block = hash = random", "hypergraph"]
    shared = series[series["series"] == "block = hash = random"]
    assert shared["mb_moved"].tolist() == [4.0, 2.0, 1.0] and (shared["partitions"] == 3).all()
    # one byte more in one layer: no longer the same series
    runs, layers = _model_layers({"block": same, "hash": same, "random": [4e6, 2e6, 1e6 + 1]})
    series = report.communication_series(report.communication(runs, layers))
    assert list(dict.fromkeys(series["series"])) == ["block = hash", "random"]
    pytest.importorskip("matplotlib")
    from sdnn_dask.report import figures

    fig = figures.communication_figure(series)
    lines = fig.axes[0].get_lines()
    assert [line.get_label() for line in lines] == ["block = hash (identical bytes)", "random"]
    assert lines[0].get_marker() != lines[1].get_marker()  # told apart even where they meet
    assert lines[0].get_markevery() != lines[1].get_markevery()


def test_rate_plot_legend_order():
    pytest.importorskip("matplotlib")
    from sdnn_dask.report import figures

    cmp = report.comparison(_hand_made())
    fig = figures.rate_figure(cmp[cmp["network"] == "A"])
    _, labels = fig.axes[0].get_legend_handles_labels()
    assert labels == ["serial reference", "serial kernel", "data block", "data hash",
                      "model block, direct", "model hash, direct"]
    assert fig.axes[0].get_yscale() == "linear"  # 4x span: no log axis needed
    assert fig.axes[0].get_xlabel() == "Dask workers"
    data = next(line for line in fig.axes[0].get_lines() if line.get_label() == "data hash")
    assert len(data.get_xdata()) == 2  # one line through 1 and 2 workers


PROJECTION = pd.DataFrame({
    "network": ["A", "A", "A"], "strategy": ["data", "data", "model"],
    "partition": ["hash", "hash", "block"], "workers": [2, 4, 2], "rows": [10, 10, 10],
    "measured_s": [2.5, 1.4, 5.0], "projected_s": [2.6, 1.0, 5.5],
    "error_pct": [4.0, -28.571, 10.0], "held_out": [False, True, False],
})


def test_projection_section_only_with_a_projection(tmp_path):
    runs = _hand_made()
    without = html_report.html_report(runs, pd.DataFrame())
    assert "Projected against measured" not in without and 'id="projection"' not in without
    page = html_report.html_report(runs, pd.DataFrame(), projection=PROJECTION)
    section = page[page.index('<section id="projection">'):]
    for cell in ("+4.0%", "-28.6%", "+10.0%", "held out"):
        assert f">{cell}</td>" in section
    assert "median |error| 7.0% over 2 fitted points; 28.6% over 1 held-out points" in section
    table = section[section.index('<table class="projection">'):]
    assert table.count("<tr>") == 4  # header and three rows
    with pytest.raises(ValueError, match="lacks columns"):
        html_report.html_report(runs, pd.DataFrame(), projection=PROJECTION.drop(
            columns="held_out"))
    pytest.importorskip("matplotlib")
    names = [p.name for p in html_report.write_report(tmp_path, runs, pd.DataFrame(),
                                                      projection=PROJECTION)]
    assert "projection.png" in names and "report.html" in names
    assert "(projection.png)" in (tmp_path / "summary.md").read_text()
    assert "| A | data | hash | 4 | 10 | 1.40 | 1.00 | -28.6% | True |" in \
        (tmp_path / "summary.md").read_text()
    none = [p.name for p in html_report.write_report(tmp_path / "n", runs, pd.DataFrame())]
    assert "projection.png" not in none


def test_without_matplotlib_the_tables_stay(monkeypatch, tmp_path):
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.setitem(sys.modules, name, None)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    runs = _hand_made()
    page = html_report.html_report(runs, pd.DataFrame(), projection=PROJECTION)
    assert "<img" not in page
    assert "pip install &#x27;sdnn_dask[report]&#x27;" in page
    assert page.count('<table class="comparison">') == 2
    assert '<table class="projection">' in page
    written = html_report.write_report(tmp_path, runs, pd.DataFrame())
    assert [p.name for p in written] == ["summary.md", "report.html"]
    assert "pip install 'sdnn_dask[report]'" in (tmp_path / "summary.md").read_text()


# --------------------------------------------------------------------------- the browser

# An image counts as decoded when the browser has it whole: loaded, with a size, and its
# last pixel drawn (the plots are opaque; a truncated PNG decodes partly, its last rows empty).
_PROBE = """<script>
window.addEventListener('load', function () {
  var imgs = Array.prototype.slice.call(document.images);
  var ok = imgs.filter(function (i) {
    if (!i.complete || i.naturalWidth === 0) return false;
    var c = document.createElement('canvas');
    c.width = i.naturalWidth; c.height = i.naturalHeight;
    var g = c.getContext('2d'); g.drawImage(i, 0, 0);
    return g.getImageData(i.naturalWidth - 1, i.naturalHeight - 1, 1, 1).data[3] === 255;
  });
  document.body.setAttribute('data-images', String(imgs.length));
  document.body.setAttribute('data-decoded', String(ok.length));
});
</script>"""


def _chromium() -> str:
    """The headless browser: ``$SDNN_CHROMIUM`` if set, else chromium on the PATH or at
    /usr/bin/chromium. Missing, the test skips (and under CI=true fails, see conftest)."""
    env = os.environ.get("SDNN_CHROMIUM")
    candidates = [env] if env else [shutil.which("chromium"), shutil.which("chromium-browser"),
                                    "/usr/bin/chromium"]
    for path in candidates:
        if path and Path(path).is_file() and os.access(path, os.X_OK):
            return path
    where = env or "chromium on the PATH or /usr/bin/chromium"
    pytest.skip(f"headless chromium not found ({where}; install Debian's chromium or set "
                "SDNN_CHROMIUM): the report's rendering is not checked")


def _browse(chromium: str, page: Path, profile: Path, *args: str) -> str:
    command = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
               "--no-first-run", "--disable-background-networking",
               "--disable-component-update", "--disable-sync", f"--user-data-dir={profile}",
               "--window-size=1400,3000", *args, page.as_uri()]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return proc.stdout


def _probe(chromium: str, html: str, tmp_path: Path, name: str) -> tuple[int, int]:
    """(images, images decoded) of ``html`` as the browser rendered it."""
    page = tmp_path / f"{name}.html"
    page.write_text(html.replace("</body>", _PROBE + "</body>"))
    dom = _browse(chromium, page, tmp_path / f"profile-{name}", "--dump-dom")
    body = re.search(r"<body[^>]*>", dom)
    assert body, dom[:500]
    images = re.search(r'data-images="(\d+)"', body.group(0))
    decoded = re.search(r'data-decoded="(\d+)"', body.group(0))
    assert images and decoded, f"the probe did not run: {body.group(0)}"
    return int(images.group(1)), int(decoded.group(1))


# The widths of the comparison tables, and of what holds them, as laid out at 1400 px.
_WIDTHS = """<script>
window.addEventListener('load', function () {
  var tables = Array.prototype.slice.call(document.querySelectorAll('table.comparison'));
  document.body.setAttribute('data-widths', tables.map(function (t) {
    return t.scrollWidth + ':' + t.parentNode.clientWidth; }).join(','));
});
</script>"""


def _table_widths(chromium: str, html: str, tmp_path: Path, name: str) -> list[int]:
    """The ``scrollWidth`` of each comparison table of ``html`` at a 1400 px viewport."""
    page = tmp_path / f"{name}.html"
    page.write_text(html.replace("</body>", _WIDTHS + "</body>"))
    dom = _browse(chromium, page, tmp_path / f"profile-{name}", "--dump-dom")
    found = re.search(r'data-widths="([0-9:,]*)"', dom)
    assert found and found.group(1), "the width probe did not run"
    return [int(pair.split(":")[0]) for pair in found.group(1).split(",")]


def _many_settings(runs: pd.DataFrame) -> pd.DataFrame:
    """``runs`` with every other run differing in six settings: a study that varies them
    all side by side, each a column of the comparison."""
    runs = runs.copy()
    odd = runs["run_id"].isin(runs["run_id"].drop_duplicates().tolist()[1::2])
    data = runs["strategy"] == "data"
    for column, value, where in (("dedup", "off", odd), ("seed", 7, odd),
                                 ("chunk_bytes", 2**22, odd),
                                 ("placement", "dynamic", odd & data),
                                 ("merge_blocks", "alone", odd & data),
                                 ("weights", "streamed", odd & data)):
        runs.loc[where, column] = value
    return runs


def test_report_renders_in_a_browser(study, tmp_path):
    pytest.importorskip("matplotlib")
    chromium = _chromium()
    runs, layers, _ = study
    folder = tmp_path / "report"
    html_report.write_report(folder, runs, layers, projection=PROJECTION.assign(
        network="radixnet-1024-12-s0"), title="tiny study")
    page = (folder / "report.html").read_text()
    # self-contained: every src is an embedded PNG, every link an anchor, no URL at all
    text = re.sub(r"data:image/png;base64,[A-Za-z0-9+/=]+", "data:", page)
    assert not re.search(r"https?:|//[a-z]|url\(|@import|<link|<script|<iframe", text, re.I)
    sources = re.findall(r'src="([^"]*)"', page)
    assert len(sources) == 13 and all(s.startswith("data:image/png;base64,")
                                      for s in sources)
    assert all(h.startswith("#") for h in re.findall(r'href="([^"]*)"', page))
    # the probe sees a broken image, and a truncated one
    whole = (folder / "rate-radixnet-1024-6-s0-600.png").read_bytes()
    broken = "".join(f'<img src="data:image/png;base64,{base64.b64encode(b).decode()}">'
                     for b in (whole[:40], whole[:-30], whole))
    assert _probe(chromium, f"<html><body>{broken}</body></html>", tmp_path,
                  "broken") == (3, 1)
    assert _probe(chromium, page, tmp_path, "probe") == (13, 13)
    # the main table fits a 1400 px window, even with six settings differing between runs
    assert all(w <= 1400 for w in _table_widths(chromium, page, tmp_path, "widths"))
    many = html_report.html_report(_many_settings(runs), layers)
    assert "<th>dedup</th>" in many and "<th>place&shy;ment</th>" in many
    widths = _table_widths(chromium, many, tmp_path, "many")
    assert len(widths) == 2 and max(widths) <= 1400, widths
    dom = _browse(chromium, folder / "report.html", tmp_path / "profile-dom", "--dump-dom")
    assert dom.count('<table class="comparison">') == 2 and "<table class=\"projection\">" in dom
    assert dom.count('<td class="check pass">PASS</td>') == 18
    shot = tmp_path / "shot.png"
    _browse(chromium, folder / "report.html", tmp_path / "profile-shot",
            f"--screenshot={shot}")
    from matplotlib import image

    pixels = image.imread(shot)[..., :3]
    assert pixels.shape[:2] == (3000, 1400)
    assert pixels.std() > 0.1  # not a blank page
    colours = np.unique((pixels[::4, ::4] * 15).round().reshape(-1, 3), axis=0)
    assert len(colours) > 50  # the plots' colours are drawn
    keep = os.environ.get("SDNN_REPORT_SCREENSHOT")
    if keep:  # to look at it
        shutil.copyfile(shot, keep)


def test_imbalance_against_blocks_needs_two_block_counts():
    pytest.importorskip("matplotlib")
    from sdnn_dask.report import figures

    def row(partition, placement, blocks, work, compute, seconds, slowest):
        return {"strategy": "data", "partition": partition, "placement": placement,
                "workers": 2, "blocks": blocks, "work_imbalance": work, "imbalance": compute,
                "seconds": seconds, "max_block_s": slowest}

    rows = [row("block", "static", 2, 1.3, 1.2, 1.0, 0.6),
            row("block", "static", 8, 1.6, 1.5, 1.1, 0.2),
            row("hash", "dynamic", 2, 1.0, 1.0, 0.9, 0.5),
            row("hash", "dynamic", 8, 1.1, 1.1, 0.95, 0.15)]
    cmp = pd.DataFrame(rows)
    fig = figures.imbalance_figure(cmp)
    lines = {line.get_label(): line for ax in fig.axes for line in ax.get_lines()}
    assert lines["block, static, 2 w"].get_ydata().tolist() in ([1.3, 1.6], [1.2, 1.5],
                                                               [1.0, 1.1])
    assert "block: slowest block (P = blocks, static)" in lines  # static runs only
    assert "hash: slowest block (P = blocks, static)" not in lines
    # merged blocks' seconds are shares: the slowest block alone comes from runs with
    # merge false where the study has them, and is labelled as shares where it has not
    merged = cmp.assign(merge_blocks="merged")
    alone = pd.DataFrame([{**rows[0], "merge_blocks": "alone", "max_block_s": 0.7},
                          {**rows[1], "merge_blocks": "alone", "max_block_s": 0.3}])
    lines = {line.get_label(): line for ax in figures.imbalance_figure(merged).axes
             for line in ax.get_lines()}
    assert "block: slowest block (P = blocks, static, merged shares)" in lines
    lines = {line.get_label(): line for ax in figures.imbalance_figure(
        pd.concat([merged, alone], ignore_index=True)).axes for line in ax.get_lines()}
    assert lines["block: slowest block (P = blocks, static)"].get_ydata().tolist() == [0.7, 0.3]
    assert "block, static, alone, 2 w" in lines and "block, static, 2 w" in lines
    assert figures.imbalance_figure(cmp[cmp["blocks"] == 2]) is None
    assert figures.imbalance_figure(cmp.assign(strategy="model")) is None
    # blocks that only follow the workers (1 on 1, 2 on 2) are not a block sweep
    assert figures.imbalance_figure(pd.DataFrame([
        {**rows[0], "workers": 1, "blocks": 1}, {**rows[0], "workers": 2, "blocks": 2}])) is None
