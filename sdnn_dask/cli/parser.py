"""The ``sdnn-dask`` argument parser: every command's options, their types and checks, and
the command each one calls.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

from .. import config, records
from ..partition.traffic import DEFAULT_SAMPLE
from ..registry import NEURON_PARTITIONS, ORDERS, ROW_PARTITIONS, STRATEGIES
from ..study.validation import clipped, shown
from ..training.optim import MAX_EPOCHS, MAX_LR
from .cluster import cmd_cluster
from .common import DEFAULT_RESULTS
from .compare import cmd_compare
from .convert import cmd_convert
from .generate import cmd_generate
from .infer import cmd_infer
from .notebook import cmd_notebook
from .partition import cmd_partition
from .report import cmd_report
from .study import cmd_study
from .train import DIGITS_BATCH, DIGITS_EPOCHS, DIGITS_LAYERS, TRAIN_TASKS, cmd_train

# --------------------------------------------------------------------------- option types


def _integer(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{shown(text)} is not an integer") from None


def _at_least(low: int):
    """An argparse ``type=``: an integer ``>= low`` (argparse exits 2 with ``error:``)."""

    def parse(text: str) -> int:
        value = _integer(text)
        if value < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {value}")
        return value

    parse.__name__ = f"integer >= {low}"
    return parse


POSITIVE = _at_least(1)
NON_NEGATIVE = _at_least(0)


def supported_sizes() -> list[int]:
    """The N the challenge defines (a bias for), hence the ones a network can have here."""
    return sorted(int(k) for k in config.get("bias"))


def _neurons(text: str) -> int:
    value = _integer(text)
    sizes = supported_sizes()
    if value not in sizes:
        raise argparse.ArgumentTypeError(
            f"must be one of {', '.join(map(str, sizes))} (the challenge's sizes), got {value}")
    return value


def _epsilon(text: str) -> float:
    # the partitioner takes any epsilon >= 0 (0: perfect balance, as far as it can)
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{shown(text)} is not a number") from None
    if not (math.isfinite(value) and value >= 0):
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {shown(text)}")
    return value


def _positive_list(text: str) -> list[int]:
    try:
        values = [int(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected positive integers like 64,512, got "
                                         f"{shown(text)}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError(f"expected positive integers like 64,512, got "
                                         f"{shown(text)}")
    return values


# --------------------------------------------------------------------------- option groups


def _add_network_arguments(group: argparse._ArgumentGroup, *, with_inputs: bool,
                           layers: int | None = 120, layers_help: str = "layers (120)"
                           ) -> None:
    group.add_argument("--neurons", "-N", type=_neurons, default=1024,
                       help="neurons per layer: 1024, 4096, 16384 or 65536 (1024)")
    group.add_argument("--layers", "-L", type=POSITIVE, default=layers, help=layers_help)
    if with_inputs:
        group.add_argument("--inputs", "-n", type=POSITIVE, default=None,
                           help="input rows: generated count (60000), or the first rows of "
                                "--data (default: all)")
    group.add_argument("--seed", type=NON_NEGATIVE, default=0, help="seed of what is generated (0)")
    if with_inputs:
        group.add_argument("--order", choices=ORDERS, default="official-like",
                           help="row order of generated inputs: official-like (survivors "
                                "cluster along the rows as in the official inputs) or iid "
                                "(official-like)")
    group.add_argument("--data", type=Path, default=None,
                       help="challenge folder with neuron{N}/n{N}-l{k}.tsv[.gz]"
                            + (" and the inputs" if with_inputs else "")
                            + "; -L is capped at the layers it holds (default: generate)")
    group.add_argument("--no-cache", action="store_true",
                       help="do not keep a binary cache of the parsed --data files")


def _add_model_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("model parallelism and hybrid")
    g.add_argument("-k", "--parts", type=POSITIVE, default=None,
                   help="neuron parts (default: one per worker)")
    g.add_argument("--row-groups", type=POSITIVE, default=2,
                   help="row groups R of the hybrid, each run by its own k parts (2)")
    g.add_argument("--epsilon", type=_epsilon, default=0.03,
                   help="hypergraph partitioning's imbalance bound (0.03)")
    g.add_argument("--transport", default="direct",
                   help="how parts exchange activations: direct (worker to worker, one "
                        "long-running task per part) or graph (a Dask task per part and "
                        "layer, through the scheduler); compare takes a list, e.g. "
                        "direct,graph (direct)")


def _add_problem_arguments(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("network and inputs (generated unless --data is given)")
    _add_network_arguments(g, with_inputs=True)
    g.add_argument("--inputs-file", type=Path, default=None,
                   help="inputs file (default: DATA/sparse-images-{N}.tsv[.gz])")
    g.add_argument("--truth", type=Path, default=None,
                   help="categories file (default: DATA/neuron{N}-l{L}-categories.tsv[.gz] "
                        "if present)")
    g.add_argument("--tile", type=POSITIVE, default=1,
                   help="repeat the inputs this many times (e.g. official 1200 rows x 50)")


def _add_kernel_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--dedup", action=argparse.BooleanOptionalAction, default=None,
        help="compute identical live rows once, in every strategy (the same bits; records "
             "say which was used); --no-dedup steps every copy, as the papers' codes do "
             "(default: sdnn.kernel.dedup, on)")
    parser.add_argument(
        "--classes", action=argparse.BooleanOptionalAction, default=None,
        help="compute identical output neurons once (equal columns of W, equal bias: "
             "RadiX-Net's come 16 to a class), in every strategy (the same bits; records "
             "say which was used); --no-classes computes every neuron (default: "
             "sdnn.kernel.classes, on)")


def _add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cluster", default=None, metavar="WHERE",
        help="where data parallelism runs: local (default: a loopback-only LocalCluster with TLS), "
             "slurm (workers as SLURM jobs, TLS), slurm-batch (inside srun, see "
             "studies/slurm-compare.sbatch), a profile of sdnn.clusters, or a running "
             "scheduler's address (tls://host:port)")
    parser.add_argument("--workers", type=POSITIVE, default=None,
                        help="workers to start: LocalCluster processes (default: cores) or "
                             "SLURM workers (default: sdnn.slurm.n-workers)")


# --------------------------------------------------------------------------- the parser


class _Parser(argparse.ArgumentParser):
    """argparse's parser, its errors cut to a sane length: its own messages quote what
    was given (``invalid choice: '<a megabyte>'``)."""

    def error(self, message: str):  # type: ignore[override]
        super().error(clipped(message))


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="sdnn-dask",
        description="Run and compare parallel strategies for sparse DNN inference "
                    "(HPEC Sparse DNN Graph Challenge) on Dask.",
    )
    parser.add_argument("--version", action="version",
                        version=f"%(prog)s {records.versions()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    p = sub.add_parser("generate", help="write a RadiX-Net network and inputs in challenge format")
    p.add_argument("out", type=Path, help="output folder")
    p.add_argument("--neurons", "-N", type=_neurons, default=1024,
                   help="neurons per layer: 1024, 4096, 16384 or 65536 (1024)")
    p.add_argument("--layers", "-L", type=POSITIVE, default=120, help="layers (120)")
    p.add_argument("--inputs", "-n", type=POSITIVE, default=None, help="input rows (60000)")
    p.add_argument("--seed", type=NON_NEGATIVE, default=0,
                   help="seed of the network's permutations and of the inputs (0)")
    p.add_argument("--order", choices=ORDERS, default="official-like",
                   help="row order of the inputs: official-like (survivors cluster along "
                        "the rows as in the official inputs) or iid (official-like)")
    p.add_argument("--gzip", action="store_true", help="write .tsv.gz files")
    p.add_argument("--no-truth", action="store_true",
                   help="do not compute and write the categories file")
    p.add_argument("--store", action="store_true",
                   help="also write the network as a binary network store, "
                        "OUT/neuron{N}-l{L}.store (see convert; default: not written)")
    p.add_argument("--store-only", action="store_true",
                   help="write only the network store, OUT/neuron{N}-l{L}.store, layer by "
                        "layer as it is generated (for networks larger than memory; no "
                        "layer files, inputs or categories)")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress messages")
    p.set_defaults(func=cmd_generate)

    p = sub.add_parser("convert", help="convert challenge layer files into a binary, "
                                       "memory-mappable network store, a Dask task per file; "
                                       "or rewrite a store in the current format version")
    p.add_argument("source", type=Path, metavar="SOURCE",
                   help="challenge folder with neuron{N}/n{N}-l{k}.tsv[.gz] (or the "
                        "neuron{N} folder); or a network store (a folder with manifest.json, "
                        "of any version this release reads), rewritten here layer by layer "
                        "in the current version, without a cluster")
    p.add_argument("out", type=Path, metavar="OUT",
                   help="the store's folder (new, or empty; or a store, with --overwrite: "
                        "SOURCE itself, to rewrite a store in place)")
    p.add_argument("--neurons", "-N", type=_neurons, default=None,
                   help="neurons per layer: 1024, 4096, 16384 or 65536 (default: 1024; for a "
                        "store SOURCE, its N, and a different -N is an error)")
    p.add_argument("--layers", "-L", type=POSITIVE, default=None,
                   help="layers 1..L to convert, every file present (default: 120; for a "
                        "store SOURCE, all it holds)")
    p.add_argument("--overwrite", action="store_true",
                   help="replace a network store at OUT, once the new one is whole (default: "
                        "an existing OUT is an error)")
    _add_cluster_arguments(p)
    p.add_argument("--quiet", "-q", action="store_true", help="no progress messages")
    p.set_defaults(func=cmd_convert)

    p = sub.add_parser("infer", help="run one strategy; print the rate, PASS/FAIL with truth")
    _add_problem_arguments(p)
    _add_kernel_arguments(p)
    p.add_argument("--strategy", choices=STRATEGIES, default="data",
                   help="reference or kernel (serial, here), data, model or hybrid "
                        "parallelism (data)")
    p.add_argument("--partition", choices=tuple(dict.fromkeys(ROW_PARTITIONS
                                                              + NEURON_PARTITIONS)),
                   default="block", help="row partition (data) or neuron partition (model, "
                   "hybrid); block")
    _add_cluster_arguments(p)
    p.add_argument("--blocks", type=POSITIVE, default=None,
                   help="row blocks of data parallelism (default: one per worker)")
    _add_model_arguments(p)
    p.add_argument("--weights", choices=("auto", "resident", "streamed"), default=None,
                   help="a network store's weights (--data STORE): read into memory, or "
                        "streamed layer by layer (every strategy; model parallelism and "
                        "the hybrid stream each part's own slice); auto streams what does "
                        "not fit in half the memory (default: sdnn.data-parallel.weights, "
                        "auto)")
    p.add_argument("--categories-out", type=Path, default=None,
                   help="write the categories found to this file (default: none written)")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress messages")
    p.set_defaults(func=cmd_infer)

    p = sub.add_parser("compare", help="the main job: serial vs data, model and hybrid "
                                       "parallelism, verified, recorded and reported")
    _add_problem_arguments(p)
    _add_kernel_arguments(p)
    p.add_argument("--partitions", default=",".join(ROW_PARTITIONS),
                   help="row partitions of the data-parallel runs, comma-separated "
                   f"({','.join(ROW_PARTITIONS)}; none: no data-parallel runs)")
    p.add_argument("--model", default=None,
                   help="neuron partitions of the model-parallel runs "
                   f"({','.join(NEURON_PARTITIONS)}; hypergraph needs the partition extra "
                   "and is left out of the default without it; none: no model-parallel runs)")
    p.add_argument("--hybrid", default=None,
                   help="neuron partitions of the hybrid runs (--row-groups x --parts; "
                   "default as --model; none: no hybrid runs)")
    _add_cluster_arguments(p)
    p.add_argument("--blocks", type=POSITIVE, default=None,
                   help="row blocks of data parallelism (default: one per worker)")
    _add_model_arguments(p)
    p.add_argument("--repeat", type=POSITIVE, default=3,
                   help="runs of each configuration; the table shows medians and the "
                        "summary calls one fastest only where the repeats' spreads do not "
                        "overlap, so 1 cannot (3)")
    p.add_argument("--no-warm-up", action="store_true",
                   help="no untimed warm-up run before each executor's first timed run")
    p.add_argument("--results", type=Path, default=DEFAULT_RESULTS,
                   help="folder for records.csv, layers.csv, summary.md and the plots "
                        f"({DEFAULT_RESULTS}/, which git ignores; the repository's curated "
                        "results/ was made with --results results)")
    p.add_argument("--no-write", action="store_true", help="print only; write no records")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress messages")
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("train", help="training: serial, data and model parallel, checked "
                                     "against the serial run (--task steps: time and bytes "
                                     "per step; digits: accuracy per epoch)")
    p.add_argument("--task", choices=TRAIN_TASKS, default="steps",
                   help="steps: timed steps on the network's pattern with random labels, "
                        "training.csv and the training.md report; digits: whole epochs on "
                        "scikit-learn's digits (the train extra), training-epochs.csv (steps)")
    g = p.add_argument_group("network (generated unless --data is given)")
    _add_network_arguments(g, with_inputs=False, layers=None,
                           layers_help=f"layers (120; --task digits: {DIGITS_LAYERS})")
    p.add_argument("--batches", type=_positive_list, default=None,
                   help="--task steps: batch sizes, comma-separated (default 64,512)")
    p.add_argument("--steps", type=POSITIVE, default=None,
                   help="--task steps: timed steps per batch size, after an untimed one (3)")
    p.add_argument("--epochs", type=POSITIVE, default=None,
                   help=f"--task digits: passes over the training digits, at most "
                        f"{MAX_EPOCHS:,} ({DIGITS_EPOCHS})")
    p.add_argument("--batch", type=_positive_list, default=None,
                   help=f"--task digits: rows per step ({DIGITS_BATCH}); several, "
                        "comma-separated, run each and say where data and model "
                        "parallelism cross")
    p.add_argument("--model", default="block",
                   help="neuron partitions of the model-parallel runs, comma-separated "
                        f"({','.join(NEURON_PARTITIONS)}; none: no model-parallel runs) "
                        "(block)")
    p.add_argument("-k", "--parts", type=POSITIVE, default=None,
                   help="neuron parts (default: one per worker)")
    p.add_argument("--row-groups", type=POSITIVE, default=2,
                   help="row groups of the hybrid runs, each run by its own copy of the k "
                        "parts of every --model partition; 1: no hybrid runs (2)")
    p.add_argument("--lr", type=float, default=0.01,
                   help=f"SGD learning rate, at most {MAX_LR:g} (0.01)")
    p.add_argument("--momentum", type=float, default=0.9, help="SGD momentum (0.9)")
    _add_cluster_arguments(p)
    p.add_argument("--results", type=Path, default=DEFAULT_RESULTS,
                   help="folder for training.csv (one row per step), training.md and "
                        "training.png (--task steps) or training-epochs.csv (one row per "
                        f"epoch, --task digits) ({DEFAULT_RESULTS}/)")
    p.add_argument("--no-write", action="store_true", help="print only; write no records")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress messages")
    p.set_defaults(func=cmd_train)

    p = sub.add_parser("partition", help="partition every layer's neurons into k parts; "
                                         "print km1 (communication) and balance")
    _add_problem_arguments(p)
    p.add_argument("-k", "--parts", dest="k", type=POSITIVE, default=4, help="parts (4)")
    p.add_argument("--method", choices=NEURON_PARTITIONS, default="hypergraph",
                   help="how to split each layer's neurons (hypergraph: Mt-KaHyPar, the "
                        "partition extra)")
    p.add_argument("--epsilon", type=_epsilon, default=0.03,
                   help="hypergraph imbalance bound (0.03)")
    p.add_argument("--nbuckets", type=POSITIVE, default=1, help="buckets of the hash (P = 128 x)")
    p.add_argument("--out", type=Path, default=None,
                   help="write the partition (.npz; default: not written)")
    p.add_argument("--per-layer", action="store_true", help="print every layer's figures")
    p.add_argument("--objective", choices=("traffic", "km1"), default="traffic",
                   help="hypergraph: traffic (nets weighted by the nonzeros a sample of the "
                        "inputs sends; Mt-KaHyPar only on the layers that carry traffic) or "
                        "km1 (every net 1, every layer partitioned; hours at 65536-1920) "
                        "(traffic)")
    p.add_argument("--sample", type=POSITIVE, default=None,
                   help=f"input rows sampled to estimate the traffic ({DEFAULT_SAMPLE})")
    p.add_argument("--forecast", action="store_true",
                   help="also forecast the bytes a model-parallel run of the inputs moves "
                        "(one more pass of the sample)")
    p.add_argument("--no-partition-cache", action="store_true",
                   help="recompute a hypergraph partition even if one is cached")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress messages")
    p.set_defaults(func=cmd_partition)

    p = sub.add_parser("cluster", help="cluster helpers: preview a SLURM job script, show a "
                                       "cluster profile")
    p.add_argument("action", choices=("job-script", "show"),
                   help="job-script: print the script each SLURM worker job runs (submits "
                        "nothing); show: print a profile's options")
    p.add_argument("--cluster", default=None, metavar="PROFILE",
                   help="slurm (default for job-script), local, slurm-batch or a profile of "
                        "sdnn.clusters")
    p.set_defaults(func=cmd_cluster)

    p = sub.add_parser("study", help="run a study file's grid (e.g. studies/quick.yaml) on one "
                                     "cluster, each run recorded as it finishes; resumable")
    p.add_argument("study", type=Path, help="the study file (YAML; see sdnn_dask.study.Study)")
    p.add_argument("--resume", action="store_true",
                   help="go on with the study recorded in --results, skipping the runs "
                        "already there (without it, a folder holding runs is an error)")
    p.add_argument("--results", type=Path, default=None,
                   help=f"the study's folder (default: {DEFAULT_RESULTS}/NAME, NAME the "
                        "study's name; git ignores it)")
    _add_cluster_arguments(p)
    p.add_argument("--quiet", "-q", action="store_true", help="no progress bar or messages")
    p.set_defaults(func=cmd_study)

    p = sub.add_parser("notebook", help="execute a notebook (e.g. studies/quick_study.ipynb) "
                                        "with its clusters where --cluster says")
    p.add_argument("notebook", type=Path, help="the .ipynb to run")
    _add_cluster_arguments(p)
    p.add_argument("--results", type=Path, default=DEFAULT_RESULTS,
                   help="results folder: the executed notebook goes in its notebooks/ "
                        f"({DEFAULT_RESULTS}/, which git ignores)")
    p.add_argument("--out", type=Path, default=None,
                   help="the executed notebook (default: RESULTS/notebooks/"
                        "NAME.executed.ipynb)")
    p.add_argument("--timeout", type=POSITIVE, default=1800, help="seconds per cell (1800)")
    p.add_argument("--quiet", "-q", action="store_true", help="no progress messages")
    p.set_defaults(func=cmd_notebook)

    p = sub.add_parser("report", help="build the report (report.html, summary.md, plots) from "
                                      "a results folder's records, and print the summary")
    p.add_argument("results_folder", type=Path, nargs="?", default=None, metavar="RESULTS",
                   help=f"the results folder (default: {DEFAULT_RESULTS})")
    p.add_argument("--results", type=Path, default=DEFAULT_RESULTS, help=argparse.SUPPRESS)
    p.add_argument("--print-only", action="store_true",
                   help="print the summary; write nothing")
    p.add_argument("--published", action="store_true",
                   help="also print each size's seconds and edges/s beside the challenge's "
                        "published figures (GraphBLAS, DistSparseDNN, SNICIT)")
    p.add_argument("--write", action="store_true", help=argparse.SUPPRESS)  # the default now
    p.set_defaults(func=cmd_report)
    return parser
