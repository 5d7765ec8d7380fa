"""The command line, run as a user runs it (in a subprocess for the main job)."""

from __future__ import annotations

import subprocess
import sys

import pandas as pd
import pytest

from sdnn_dask.cli import main
from sdnn_dask.core.reference import infer_reference
from sdnn_dask.data import io


@pytest.fixture(scope="module")
def challenge_folder(tmp_path_factory):
    """Generated files whose truth is made by scipy's reference recurrence, not the kernel
    (generate's own truth would let a kernel bug pass every PASS check below)."""
    folder = tmp_path_factory.mktemp("challenge")
    assert main(["generate", str(folder), "-N", "1024", "-L", "12", "-n", "400", "--seed", "3",
                 "--gzip", "--no-truth", "-q"]) == 0
    net = io.read_network(folder, 1024, 12)
    truth = infer_reference(net, io.read_inputs(folder, 1024)).categories
    io.write_categories(io.categories_path(folder, 1024, 12), truth)
    return folder


def test_generate_writes_challenge_files(tmp_path):
    folder = tmp_path / "gen"
    assert main(["generate", str(folder), "-N", "1024", "-L", "12", "-n", "400", "--seed", "3",
                 "-q"]) == 0
    assert len(list((folder / "neuron1024").glob("n1024-l*.tsv"))) == 12
    inputs = io.read_inputs(folder, 1024)
    assert inputs.shape == (400, 1024)
    truth = io.read_categories(io.categories_path(folder, 1024, 12))
    assert 0 < len(truth) < 400
    expected = infer_reference(io.read_network(folder, 1024, 12), inputs).categories
    assert truth.tolist() == expected.tolist()  # generate's truth is the reference's


@pytest.mark.parametrize("strategy", ["reference", "kernel", "data"])
def test_infer_passes_against_truth(challenge_folder, strategy, capsys):
    code = main(["infer", "--data", str(challenge_folder), "-L", "12", "--strategy", strategy,
                 "--partition", "hash", "--workers", "2", "-q"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "PASS" in out and "edges/s" in out


@pytest.mark.parametrize("transport", ["direct", "graph"])
def test_infer_model_parallel_passes_on_either_transport(challenge_folder, transport, capsys):
    code = main(["infer", "--data", str(challenge_folder), "-L", "12", "--strategy", "model",
                 "--partition", "hash", "-k", "3", "--transport", transport, "--workers", "2",
                 "-q"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "PASS" in out and "model/hash" in out


def test_infer_fails_against_wrong_truth(challenge_folder, tmp_path, capsys):
    wrong = io.write_categories(tmp_path / "wrong.tsv", [0, 1, 2])
    code = main(["infer", "--data", str(challenge_folder), "-L", "12", "--strategy", "kernel",
                 "--truth", str(wrong), "-q"])
    assert code == 1
    assert "FAIL" in capsys.readouterr().out


def test_compare_main_job(challenge_folder, tmp_path):
    results = tmp_path / "results"
    proc = subprocess.run(
        [sys.executable, "-m", "sdnn_dask", "compare", "--data", str(challenge_folder),
         "-L", "12", "--workers", "2", "--repeat", "2", "--results", str(results)],
        capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr + proc.stdout
    table = pd.read_csv(results / "records.csv")
    runs = table.drop_duplicates("run_id")
    # reference x2, kernel x2, then x 2 repeats on 2 workers: 3 row partitions (data),
    # 4 neuron partitions (model), 4 (hybrid)
    assert len(runs) == 4 + 2 * (3 + 4 + 4)
    assert set(runs["check"]) == {"PASS"} and set(runs["check_against"]) == {"truth"}
    assert set(runs.loc[runs.strategy == "data", "partition"]) == {"block", "hash", "random"}
    neuron = {"block", "hash", "random", "hypergraph"}
    for strategy in ("model", "hybrid"):
        rows = runs[runs.strategy == strategy]
        assert set(rows["partition"]) == neuron
        assert (rows["parts"] == 2).all() and (rows["bytes_moved"] > 0).all()
        assert (rows["predicted_volume"] > 0).all()
    assert (runs.loc[runs.strategy == "hybrid", "row_groups"] == 2).all()
    parallel = runs.strategy.isin(["model", "hybrid"])
    assert set(runs.loc[parallel, "transport"]) == {"direct"}  # the default
    assert runs.loc[~parallel, "transport"].isna().all()
    hyper = runs[(runs.strategy == "model") & (runs.partition == "hypergraph")]
    block = runs[(runs.strategy == "model") & (runs.partition == "block")]
    assert hyper["bytes_moved"].max() < block["bytes_moved"].min()
    layers = pd.read_csv(results / "layers.csv")
    model_layers = layers[layers.run_id.isin(runs.loc[runs.strategy == "model", "run_id"])]
    assert model_layers["bytes_in"].sum() == runs.loc[runs.strategy == "model",
                                                      "bytes_moved"].sum()
    assert (results / "summary.md").is_file() and (results / "communication.png").is_file()
    summary = (results / "summary.md").read_text()
    assert "| data | hash |" in summary and "| model | hypergraph |" in summary
    for word in ("strategy", "speedup", "imbalance", "mb_moved", "PASS"):
        assert word in proc.stdout
    assert "[26/26]" in proc.stderr  # progress was shown


@pytest.mark.parametrize(("strategy", "partition"), [("model", "hypergraph"), ("hybrid", "hash")])
def test_infer_model_and_hybrid(challenge_folder, strategy, partition, capsys):
    code = main(["infer", "--data", str(challenge_folder), "-L", "12", "--strategy", strategy,
                 "--partition", partition, "--workers", "2", "-k", "3", "-q"])
    out = capsys.readouterr().out
    assert code == 0, out
    assert f"{strategy}/{partition}" in out and "PASS" in out


def test_bad_partition_names_are_clear_errors(challenge_folder, capsys):
    with pytest.raises(SystemExit, match="--model: unknown partition"):
        main(["compare", "--data", str(challenge_folder), "-L", "12", "--model", "metis"])
    with pytest.raises(SystemExit, match="takes a row partition"):
        main(["infer", "--data", str(challenge_folder), "-L", "12", "--strategy", "data",
              "--partition", "hypergraph"])


def test_bad_data_is_a_clear_error(tmp_path, capsys):
    (tmp_path / "neuron1024").mkdir()
    (tmp_path / "neuron1024" / "n1024-l1.tsv").write_text("1\t1\t0.0625\n1\tfoo\t1\n")
    code = main(["infer", "--data", str(tmp_path), "-L", "1", "--strategy", "kernel"])
    err = capsys.readouterr().err
    assert code == 2
    assert "n1024-l1.tsv, line 2" in err and "'foo', not a number" in err


def test_help_as_module():
    proc = subprocess.run([sys.executable, "-m", "sdnn_dask", "--help"], capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0 and "compare" in proc.stdout


def test_partition_command(tmp_path, capsys, monkeypatch):
    pytest.importorskip("mtkahypar", reason="needs the partition extra")
    monkeypatch.setenv("SDNN_CACHE_DIR", str(tmp_path / "cache"))
    out = tmp_path / "p.npz"
    code = main(["partition", "-L", "6", "-k", "4", "--method", "hypergraph", "--per-layer",
                 "--objective", "km1", "--out", str(out), "-q"])
    text = capsys.readouterr().out
    assert code == 0
    assert "km1" in text and "imbalance" in text and "computed in" in text
    first_layer = next(line.split() for line in text.splitlines() if line.startswith("1 "))
    assert first_layer[:2] == ["1", "64"]  # layer 1 of RadiX-Net at k = 4: km1 64, as integers
    from sdnn_dask.partition import NeuronPartition

    assert NeuronPartition.load(out).k == 4
    code = main(["partition", "-L", "6", "-k", "4", "--method", "block", "-q"])
    assert code == 0 and "km1 " in capsys.readouterr().out
    # the default objective: weighted by the traffic of the inputs, with its forecast
    code = main(["partition", "-L", "30", "-n", "1500", "-k", "2", "--sample", "500",
                 "--forecast", "--per-layer"])
    captured = capsys.readouterr()
    assert code == 0
    assert "traffic-weighted: Mt-KaHyPar on layers 1-" in captured.out
    assert "forecast: " in captured.out and "predicted_bytes" in captured.out
    assert "layers partitioned with Mt-KaHyPar: " in captured.err


def test_compare_without_the_partition_extra(challenge_folder, tmp_path):
    """Without Mt-KaHyPar the default leaves hypergraph out (saying so); asking for it
    explicitly is an error naming the extra."""
    import os

    hide = ("import sys; sys.modules['mtkahypar'] = None; "  # as if not installed
            "from sdnn_dask.cli import main; sys.exit(main(sys.argv[1:]))")
    common = ["compare", "--data", str(challenge_folder), "-L", "12", "--workers", "2",
              "--partitions", "none", "--hybrid", "none", "--no-write"]
    env = {**os.environ, "SDNN_CACHE_DIR": str(tmp_path / "cache")}  # no cached partitions
    proc = subprocess.run([sys.executable, "-c", hide, *common], capture_output=True,
                          text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr
    assert "no hypergraph rows" in proc.stderr and "sdnn_dask[partition]" in proc.stderr
    rows = {line.split()[1] for line in proc.stdout.splitlines() if line.startswith("model")}
    assert rows == {"block", "hash", "random"}
    proc = subprocess.run([sys.executable, "-c", hide, *common, "--model", "hypergraph"],
                          capture_output=True, text=True, timeout=600, env=env)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "pip install 'sdnn_dask[partition]'" in proc.stderr
    assert "[1/" not in proc.stderr  # refused before any run


def test_layers_are_taken_from_a_folder_that_holds_fewer(challenge_folder, capsys):
    code = main(["infer", "--data", str(challenge_folder), "--strategy", "kernel"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert (f"{challenge_folder} holds layers 1-12 of N = 1024, not 120: running 12 layers"
            in captured.err)
    assert "PASS" in captured.out  # the 12-layer truth file was found and matched


def test_a_cached_partition_says_so_and_a_long_one_shows_progress(tmp_path, capsys,
                                                                 monkeypatch):
    pytest.importorskip("mtkahypar", reason="needs the partition extra")
    monkeypatch.setenv("SDNN_CACHE_DIR", str(tmp_path / "cache"))
    command = ["partition", "-L", "4", "-n", "2000", "-k", "2", "--method", "hypergraph"]
    assert main(command) == 0
    first = capsys.readouterr()
    assert "sample rows through the layers: 4/4" in first.err
    assert "layers partitioned with Mt-KaHyPar: 4/4" in first.err
    assert ("partitioning the neurons of radixnet-1024-4-s0 into 2 parts (hypergraph, "
            "traffic): done in") in first.err
    assert main(command) == 0
    second = capsys.readouterr()
    assert "reading the cached partition" in second.err
    assert "traffic): done in" not in second.err  # not "done in 0.0 s" for a cache read
    assert "read from the cache (computed in" in second.out
    # other inputs, other traffic: not the cached partition
    assert main([*command[:3], "-n", "1500", *command[5:]]) == 0
    assert "reading the cached partition" not in capsys.readouterr().err


def _options():
    import argparse

    from sdnn_dask.cli import build_parser

    sub = next(a for a in build_parser()._actions
               if isinstance(a, argparse._SubParsersAction))
    for command, parser in sub.choices.items():
        for action in parser._actions:
            if isinstance(action, argparse._HelpAction) or action.help == argparse.SUPPRESS:
                continue
            yield command, action


def test_every_option_says_what_it_does_and_its_default():
    """--help of every option has a text, and it names the default when there is one."""
    import argparse

    missing = []
    for command, action in _options():
        text = action.help or ""
        flag = isinstance(action, argparse._StoreTrueAction)
        default = action.default
        names_default = (flag or not action.option_strings or str(default) in text
                         or "default" in text or (default is None and "(" in text))
        if not text or not names_default:
            missing.append(f"{command} {'/'.join(action.option_strings) or action.dest}")
    assert not missing, missing


# --------------------------------------------------------------------------- network stores


@pytest.fixture(scope="module")
def small_challenge(tmp_path_factory):
    """A generated 1024-3 challenge folder (gzipped), with its network store."""
    folder = tmp_path_factory.mktemp("small")
    assert main(["generate", str(folder), "-L", "3", "-n", "50", "--gzip", "--store",
                 "-q"]) == 0
    return folder


def _equal_to_the_text_files(opened, folder, n_layers):
    text = io.read_network(folder, 1024, n_layers)
    assert opened.n_layers == n_layers and opened.edges == text.edges
    for k, expected in enumerate(text.layers, start=1):
        layer = opened.layer(k)
        assert (layer != expected).nnz == 0 and (layer.indices == expected.indices).all()
    assert (opened.bias == text.bias).all() and opened.ymax == text.ymax


def test_generate_store_writes_the_network_as_a_store(small_challenge, capsys):
    from sdnn_dask.data import store

    opened = store.open_store(small_challenge / "neuron1024-l3.store", verify=True)
    _equal_to_the_text_files(opened, small_challenge, 3)
    assert opened.name == "radixnet-1024-3-s0"
    assert opened.source == {"generated": "radixnet", "seed": 0}
    # generate again into the same folder: the store is replaced, like the other files
    assert main(["generate", str(small_challenge), "-L", "3", "-n", "50", "--gzip", "--store",
                 "--seed", "1", "--no-truth"]) == 0
    assert "the network store" in capsys.readouterr().out
    assert store.open_store(small_challenge / "neuron1024-l3.store").source["seed"] == 1
    assert not list(small_challenge.glob(".*"))  # no partial or old folder left


def test_generate_store_only_writes_the_store_alone(tmp_path, capsys):
    from sdnn_dask.data import store
    from sdnn_dask.data.radixnet import make_network

    assert main(["generate", str(tmp_path), "-N", "1024", "-L", "4", "--seed", "2",
                 "--store-only", "-q"]) == 0
    assert "wrote the network store" in capsys.readouterr().out
    assert [p.name for p in tmp_path.iterdir()] == ["neuron1024-l4.store"]  # nothing else
    held = store.open_store(tmp_path / "neuron1024-l4.store", verify=True)
    expected = make_network(1024, 4, seed=2)
    assert held.name == expected.name and held.source == {"generated": "radixnet", "seed": 2}
    for k, w in enumerate(expected.layers, start=1):
        assert abs(held.layer(k) - w).max() == 0


def test_convert_on_two_workers_gives_the_text_files(small_challenge, tmp_path, capsys):
    from sdnn_dask.data import store

    out = tmp_path / "net.store"
    assert main(["convert", str(small_challenge), str(out), "-N", "1024", "-L", "3",
                 "--workers", "2"]) == 0
    captured = capsys.readouterr()
    assert "wrote 3 layers, 98304 edges" in captured.out and str(out) in captured.out
    assert "layer files: 3/3" in captured.err  # progress was shown
    opened = store.open_store(out, verify=True)
    _equal_to_the_text_files(opened, small_challenge, 3)
    assert opened.manifest["layers"][1]["source"]["path"] == str(
        small_challenge / "neuron1024" / "n1024-l2.tsv.gz")
    assert [p.name for p in tmp_path.iterdir()] == ["net.store"]
    with pytest.raises(SystemExit, match="pass --overwrite to replace it") as info:
        main(["convert", str(small_challenge), str(out), "-L", "3"])
    assert info.value.code == 2


def test_convert_bad_input_exits_2_naming_the_file(small_challenge, tmp_path, capsys):
    data = tmp_path / "data"
    (data / "neuron1024").mkdir(parents=True)
    for k in (1, 2, 3):
        name = f"n1024-l{k}.tsv.gz"
        (data / "neuron1024" / name).write_bytes(
            (small_challenge / "neuron1024" / name).read_bytes())
    bad = data / "neuron1024" / "n1024-l2.tsv"
    bad.with_suffix(".tsv.gz").unlink()
    bad.write_text("1\t1\t0.5\n1\t2\tx\n")
    out = tmp_path / "net.store"
    assert main(["convert", str(data), str(out), "-L", "3", "--workers", "2", "-q"]) == 2
    err = capsys.readouterr().err
    assert f"error: {bad}, line 2: " in err and "'x'" in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]  # nothing half-written

    assert main(["convert", str(data), str(out), "-L", "5", "-q"]) == 2  # before any cluster
    assert "2 of 5 layer files of the 1024-neuron network are missing" in capsys.readouterr().err
    with pytest.raises(SystemExit, match="no such folder") as info:
        main(["convert", str(tmp_path / "nowhere"), str(out), "-q"])
    assert info.value.code == 2
    with pytest.raises(SystemExit, match="is not a network store") as info:
        main(["convert", str(data), str(data), "-L", "3", "--overwrite", "-q"])
    assert info.value.code == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data"]


def test_convert_rewrites_a_store_in_the_current_version(small_challenge, tmp_path, capsys):
    """A store as SOURCE (here a version-1 one, as older releases wrote): rewritten layer by
    layer, in this process, in version 2; into OUT, or in place with --overwrite."""
    from store_v1 import write_v1_store

    from sdnn_dask.data import store

    old = write_v1_store(tmp_path / "old.store", io.read_network(small_challenge, 1024, 3))
    was = store.open_store(old).nbytes()
    out = tmp_path / "new.store"
    assert main(["convert", str(old), str(out), "--workers", "2"]) == 0
    captured = capsys.readouterr()
    assert (f"wrote 3 layers, 98304 edges, 0.2 MB (from {was / 1e6:.1f} MB in version 1): "
            f"the network store {out}") in captured.out
    assert "layers: 3/3" in captured.err and "--workers are not used" in captured.err
    opened = store.open_store(out, verify=True)
    assert opened.version == 2 and opened.source["version"] == 1
    _equal_to_the_text_files(opened, small_challenge, 3)

    for argv, message in [
        (["-N", "4096"], "a store of N = 1024, not 4096"),
        (["-L", "4"], "the store holds layers 1-3, not 4"),
        ([], "a network store is there already; not replaced without overwrite; pass "
             "--overwrite to replace it"),
    ]:
        with pytest.raises(SystemExit, match=message) as info:
            main(["convert", str(old), str(old), *argv, "-q"])
        assert info.value.code == 2
    assert store.open_store(old).version == 1
    assert main(["convert", str(old), str(old), "-L", "2", "--overwrite", "-q"]) == 0
    rewritten = store.open_store(old, verify=True)
    assert (rewritten.version, rewritten.n_layers) == (2, 2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["new.store", "old.store"]

    manifest = old / "manifest.json"
    manifest.write_text(manifest.read_text().replace('"version": 2', '"version": 9'))
    assert main(["convert", str(old), str(out), "--overwrite", "-q"]) == 2
    err = capsys.readouterr().err
    assert f"error: {manifest}: version 9 of sdnn-network-store" in err
    assert "--overwrite" in err
