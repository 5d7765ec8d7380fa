"""Comparison tables: small pure functions of the records.

``records -> runs -> comparison (normalised per network) -> markdown / plot``. Nothing
here runs inference; everything can be re-made from the records
(:func:`sdnn_dask.records.read_records`). The per-layer tables (:func:`communication`,
:func:`layer_profile`, :func:`layer_times`) and the per-block one (:func:`block_times`)
are in :mod:`sdnn_dask.report.layers` and feed the plots of
:mod:`sdnn_dask.report.figures`; the markdown summary is in :mod:`sdnn_dask.report.summary`;
:mod:`sdnn_dask.report.html` puts it all in one page.

Every function looks at one study, the latest one (:func:`latest_study`), and keeps the
networks it holds apart: a configuration is :data:`CONFIG`, network and inputs included,
and every ratio compares configurations of the same network and inputs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import pandas as pd

from ..formatting import format_cell
from ..records import RUN_DTYPES, RUN_LEVEL, typed

#: What identifies a configuration: repeats of one configuration are pooled.
CONFIG = ["network", "inputs", "strategy", "partition", "row_partition", "transport",
          "workers", "blocks", "parts", "row_groups", "seed", "nbuckets", "epsilon",
          "objective", "dense_threshold", "chunk_bytes", "dedup", "placement", "merge_blocks",
          "weights"]
#: The run settings of :data:`CONFIG` a table shows only where its rows differ in them
#: (:func:`varying`): otherwise every row has the same, the default, and it goes unsaid.
SETTINGS = ("row_partition", "seed", "nbuckets", "epsilon", "objective", "dense_threshold",
            "chunk_bytes", "dedup", "placement", "merge_blocks", "weights")
#: What identifies a problem: the ratios of :func:`comparison` stay within one.
PROBLEM = ["network", "inputs"]
#: The order strategies and partitions are listed and drawn in.
STRATEGY_ORDER = ("reference", "kernel", "data", "model", "hybrid")
PARTITION_ORDER = ("none", "chunks", "block", "hash", "random", "hypergraph")
TRANSPORT_ORDER = ("", "direct", "graph")
SERIAL = ("reference", "kernel")
PARALLEL = ("data", "model", "hybrid")


def rank(values: pd.Series, order: Sequence[str]) -> pd.Series:
    """Position of each value in ``order`` (unknown values last, in their own order)."""
    known = {v: i for i, v in enumerate(order)}
    return values.astype(str).map(lambda v: known.get(v, len(order)))


def sort_configurations(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` sorted as a reader expects: per problem, serial first, then data, model,
    hybrid; within a strategy by workers, partition and transport (stable otherwise)."""
    if table.empty:
        return table
    keys = pd.DataFrame({
        "network": table["network"].astype(str), "inputs": table["inputs"],
        "s": rank(table["strategy"], STRATEGY_ORDER), "t": rank(table["transport"],
                                                                  TRANSPORT_ORDER),
        "w": table["workers"], "r": table["row_groups"] if "row_groups" in table else 1,
        "p": rank(table["partition"], PARTITION_ORDER),
    }, index=table.index)
    order = keys.sort_values(["network", "inputs", "s", "t", "w", "r", "p"],
                             kind="stable").index
    return table.loc[order].reset_index(drop=True)


def named_problems(records: pd.DataFrame) -> pd.DataFrame:
    """Typed records in which two problems with one network and row count but different
    sources (e.g. generated rows in ``iid`` and ``official-like`` order) get different
    ``network`` labels, ``name [source]``, so every table and plot keeps them apart."""
    records = typed(records, RUN_DTYPES)
    sources = records.groupby(["network", "inputs"])["source"].transform("nunique")
    clash = sources > 1
    if clash.any():
        records = records.copy()
        records.loc[clash, "network"] = (records.loc[clash, "network"].astype(str) + " ["
                                         + records.loc[clash, "source"].astype(str) + "]")
    return records


def runs(records: pd.DataFrame) -> pd.DataFrame:
    """One row per run (the block rows collapsed), in the order runs were recorded."""
    records = named_problems(records)
    table = records[RUN_LEVEL].drop_duplicates("run_id").reset_index(drop=True)
    per_block = records.groupby("run_id", sort=False)["compute_s"].agg(["sum", "max"])
    table["compute_s"] = table["run_id"].map(per_block["sum"])
    table["max_block_s"] = table["run_id"].map(per_block["max"])
    return table


def latest_study(records: pd.DataFrame) -> str:
    """The study of the records recorded last: the greatest ``time`` (ISO 8601, UTC), ties
    going to the study whose rows come last."""
    if records.empty:
        raise ValueError("no runs in the records")
    study = records["study"].astype(str).reset_index(drop=True)
    time = records["time"].astype(str).reset_index(drop=True)
    last = pd.DataFrame({"study": study, "time": time, "pos": range(len(study))})
    best = last.groupby("study", sort=False).agg(time=("time", "max"), pos=("pos", "max"))
    return str(best.sort_values(["time", "pos"]).index[-1])


def latest_runs(records: pd.DataFrame) -> pd.DataFrame:
    """:func:`runs` of the latest study only."""
    table = runs(records)
    if table.empty:
        raise ValueError("no runs in the records")
    return table[table["study"].astype(str) == latest_study(table)].reset_index(drop=True)


def _best_seconds(out: pd.DataFrame, mask: pd.Series, by: Sequence[str] = ()) -> pd.Series:
    """Per row of ``out``: the least ``seconds`` of the rows in ``mask`` with the same
    problem (and the same ``by`` columns); NaN where there is none."""
    keys = [*PROBLEM, *by]
    best = out[mask].groupby(keys, dropna=False)["seconds"].min().rename("_best")
    merged = out[keys].merge(best.reset_index(), on=keys, how="left")
    return pd.Series(merged["_best"].to_numpy(dtype=float), index=out.index)


def comparison(records: pd.DataFrame, baseline: str = "reference") -> pd.DataFrame:
    """Median over repeats of each configuration of the latest study, with speedups.

    Parameters
    ----------
    records
        Run records (``records.csv``); only the most recent study is compared
        (:func:`latest_study`). It may hold several networks (and input sizes): each ratio
        compares configurations of the same network and inputs.
    baseline
        Strategy whose fastest median time is the 1.0 of the ``speedup`` column. Every
        baseline (this one, the kernel's, data parallelism's) is taken from the
        configurations that passed the check only: a failed run's time is no yardstick.

    Returns
    -------
    pandas.DataFrame
        :data:`CONFIG`, then ``repeats, seconds, seconds_min, seconds_max, edges_per_s,
        speedup, vs_kernel, vs_data, imbalance, survivor_imbalance, work_imbalance,
        max_block_s, mb_moved, mb_predicted, predicted_volume, check, checked, neurons,
        layers, edges``, sorted by
        :func:`sort_configurations`. ``seconds`` and ``edges_per_s`` are medians over the
        repeats, ``seconds_min`` and ``seconds_max`` the fastest and slowest repeat's
        seconds (:func:`with_spread` shows them beside the median); ``mb_moved`` the
        median of the bytes moved between workers (model and hybrid runs), in MB, and
        ``mb_predicted`` the bytes forecast before the run;
        ``check`` is ``PASS`` only if every repeat passed; ``checked`` says what a
        sampled check (``check_rows``) covered (:func:`checked_text`), empty where every
        row was checked.

        ``vs_data`` is the data-parallelism ratio: the median seconds of the fastest
        data-parallel configuration of the same network with the **same number of workers**,
        divided by this configuration's seconds (above 1: faster than data parallelism on
        those workers). Where the network has no data-parallel run at that worker count it
        is empty.
    """
    table = latest_runs(records)
    grouped = table.groupby(CONFIG, sort=False, dropna=False)
    out = grouped.agg(
        repeats=("run_id", "count"),
        seconds=("wall_s", "median"),
        seconds_min=("wall_s", "min"),
        seconds_max=("wall_s", "max"),
        edges_per_s=("edges_per_s", "median"),
        imbalance=("imbalance", "median"),
        survivor_imbalance=("survivor_imbalance", "median"),
        work_imbalance=("work_imbalance", "median"),
        max_block_s=("max_block_s", "median"),
        mb_moved=("bytes_moved", lambda b: b.median() / 1e6),
        mb_predicted=("predicted_bytes", lambda b: b.median() / 1e6),
        predicted_volume=("predicted_volume", "first"),
        check=("check", lambda c: "PASS" if (c == "PASS").all() else "FAIL"),
        survivors_lo=("check_survivors", "min"),
        survivors_hi=("check_survivors", "max"),
        others=("check_others", "max"),
        neurons=("neurons", "first"),
        layers=("layers", "first"),
        edges=("edges", "first"),
    ).reset_index()
    out["checked"] = [checked_text(lo, hi, others) for lo, hi, others in
                      zip(out["survivors_lo"], out["survivors_hi"], out["others"], strict=True)]
    strategy = out["strategy"].astype(str)
    passed = out["check"] == "PASS"  # a run that failed its check is no baseline
    out["speedup"] = _best_seconds(out, passed & (strategy == baseline)) / out["seconds"]
    out["vs_kernel"] = _best_seconds(out, passed & (strategy == "kernel")) / out["seconds"]
    out["vs_data"] = _best_seconds(out, passed & (strategy == "data"), ["workers"]) \
        / out["seconds"]
    columns = [*CONFIG, "repeats", "seconds", "seconds_min", "seconds_max", "edges_per_s",
               "speedup", "vs_kernel", "vs_data", "imbalance", "survivor_imbalance",
               "work_imbalance", "max_block_s", "mb_moved", "mb_predicted", "predicted_volume",
               "check", "checked", "neurons", "layers", "edges"]
    return sort_configurations(out[columns])


def checked_text(survivors_lo: object, survivors_hi: object, others: object) -> str:
    """What a configuration's sampled checks covered, ``2416 survivors + 64 others``
    (survivors ``lo-hi`` where its repeats left different ones); ``""`` for a check of
    every row (and for records made before sampled checks said what they covered)."""
    if pd.isna(survivors_lo) or pd.isna(others):
        return ""
    lo, hi = int(survivors_lo), int(survivors_hi)
    return f"{lo if lo == hi else f'{lo}-{hi}'} survivors + {int(others)} others"


def spread_text(median: float, low: float, high: float, repeats: int = 2) -> str:
    """A median with its range, ``1.230 (1.100-1.410)``; the median alone for one repeat
    (its range says nothing) and blank when it is missing."""
    if pd.isna(median):
        return ""
    text = format_cell(float(median), "seconds")
    if pd.isna(repeats) or int(repeats) <= 1 or pd.isna(low) or pd.isna(high):
        return text
    return (f"{text} ({format_cell(float(low), 'seconds')}-"
            f"{format_cell(float(high), 'seconds')})")


def with_spread(cmp: pd.DataFrame) -> pd.DataFrame:
    """A copy of a :func:`comparison` for display: ``seconds`` as text, the median with
    the fastest and slowest repeat beside it (:func:`spread_text`), so a table shows how
    far the repeats stray. Unchanged without ``seconds_min`` (a frame from elsewhere)."""
    if not {"seconds", "seconds_min", "seconds_max"} <= set(cmp.columns):
        return cmp
    repeats = cmp["repeats"] if "repeats" in cmp else pd.Series(2, index=cmp.index)
    out = cmp.copy()
    out["seconds"] = [spread_text(m, lo, hi, n) for m, lo, hi, n in zip(
        cmp["seconds"], cmp["seconds_min"], cmp["seconds_max"], repeats, strict=True)]
    return out


def varying(table: pd.DataFrame, columns: Sequence[str] = SETTINGS) -> list[str]:
    """The ``columns`` of ``table`` in which its rows differ, in the order given.

    Blanks and NaN do not count as a value: a setting that does not apply to a strategy
    (the reference's ``dedup``, a model run's ``placement``) is blank there, and a table of
    runs that all share one setting where it applies has nothing to say about it.

    Parameters
    ----------
    table
        A :func:`comparison` (or any frame with some of ``columns``).
    columns
        The columns to look at (:data:`SETTINGS`); those missing from ``table`` are
        skipped.
    """
    out = []
    for column in columns:
        if column not in table:
            continue
        values = {str(v) for v in table[column].dropna()} - {"", "nan", "<NA>"}
        if len(values) > 1:
            out.append(column)
    return out


def problems(table: pd.DataFrame) -> list[tuple[tuple[str, int], pd.DataFrame]]:
    """``table`` split by problem (network, inputs), in the order they first appear."""
    if table.empty:
        return []
    keys = list(dict.fromkeys(zip(table["network"].astype(str), table["inputs"].astype(int),
                                  strict=True)))
    return [(key, table[(table["network"].astype(str) == key[0])
                        & (table["inputs"].astype(int) == key[1])].reset_index(drop=True))
            for key in keys]


def count(value: object) -> str:
    """An integer count as text, ``?`` when it is missing (records of an older version)."""
    return "?" if value is None or pd.isna(value) else str(int(value))


def describe(row: Mapping) -> str:
    """A configuration in words, e.g. ``hash, 2 workers`` or ``block, k=2, direct, 2 workers``
    (the strategy itself is left to the caller, except for the serial ones); ``, dedup off``
    at the end when identical rows were not merged (on, the default, goes unsaid)."""
    strategy = str(row["strategy"])
    off = ", dedup off" if str(row.get("dedup", "")) == "off" else ""
    if strategy in SERIAL:
        return f"serial {strategy}{off}"
    workers = count(row["workers"])
    words = [str(row["partition"])]
    if strategy == "data":
        if count(row["blocks"]) != workers:
            words.append(f"{count(row['blocks'])} blocks")
    else:
        parts = count(row["parts"])
        if strategy == "hybrid":
            rows = str(row.get("row_partition", "") or "")
            words.append(f"{count(row['row_groups'])} row groups"
                         f"{f' ({rows})' if rows else ''} x {parts} parts")
        else:
            words.append(f"k={parts}")
        if str(row["transport"]):
            words.append(str(row["transport"]))
    words.append(f"{workers} worker{'s' if workers != '1' else ''}")
    return ", ".join(words) + off


_FAMILY = {"data": "data parallelism", "model": "model parallelism", "hybrid": "the hybrid",
           "reference": "the serial reference", "kernel": "the serial kernel"}


def _ratio(value: float) -> str:
    return f"{value:.2f}x"


def headline(cmp: pd.DataFrame) -> str:
    """The story of one problem's :func:`comparison` rows, in a few sentences.

    Which passing configuration is fastest (its rate, and how it compares with the serial
    kernel and with data parallelism on the same workers), then the best configuration of
    each other parallel strategy, with the MB it moved; configurations that failed the
    check are counted first and never called fastest.
    """
    if cmp.empty:
        return "No runs."
    sentences = []
    failed = cmp[cmp["check"] != "PASS"]
    if len(failed):
        names = "; ".join(f"{r['strategy']} ({describe(r)})" if r["strategy"] not in SERIAL
                          else describe(r) for _, r in failed.iterrows())
        sentences.append(f"{len(failed)} of {len(cmp)} configurations FAILED the check: "
                         f"{names}.")
    ok = cmp[cmp["check"] == "PASS"]
    if ok.empty:
        return " ".join(sentences)
    has_kernel = (cmp["strategy"] == "kernel").any()

    def versus(row: pd.Series) -> list[str]:
        bits = []
        if row["strategy"] != "kernel" and has_kernel and pd.notna(row["vs_kernel"]):
            bits.append(f"{_ratio(row['vs_kernel'])} the serial kernel")
        if row["strategy"] in ("model", "hybrid") and pd.notna(row["vs_data"]):
            bits.append(f"{_ratio(row['vs_data'])} data parallelism on "
                        f"{count(row['workers'])} workers")
        return bits

    def moved(row: pd.Series) -> str:
        if row["strategy"] not in ("model", "hybrid") or pd.isna(row["mb_moved"]):
            return ""
        return f", moving {row['mb_moved']:.1f} MB over {count(row['layers'])} layers"

    fastest = ok.loc[ok["seconds"].idxmin()]
    who = _FAMILY.get(str(fastest["strategy"]), str(fastest["strategy"]))
    label = (f" ({describe(fastest)})" if fastest["strategy"] not in SERIAL
             else " (dedup off)" if str(fastest.get("dedup", "")) == "off" else "")
    bits = versus(fastest)
    sentences.append(f"{who[0].upper()}{who[1:]}{label} is fastest: "
                     f"{fastest['edges_per_s']:.3g} edges/s"
                     + (f", {' and '.join(bits)}" if bits else "") + moved(fastest) + ".")
    for strategy in PARALLEL:
        family = ok[ok["strategy"] == strategy]
        if family.empty or strategy == fastest["strategy"]:
            continue
        best = family.loc[family["seconds"].idxmin()]
        bits = versus(best)
        reach = (f" reaches {' and '.join(bits)}" if bits
                 else f" runs at {best['edges_per_s']:.3g} edges/s")
        sentences.append(f"{_FAMILY[strategy][0].upper()}{_FAMILY[strategy][1:]} at best "
                         f"({describe(best)}){reach}{moved(best)}.")
    if fastest["strategy"] in SERIAL and (ok["strategy"].isin(PARALLEL)).any():
        sentences.append("No parallel configuration beats the serial "
                         f"{fastest['strategy']} here.")
    return " ".join(sentences)


def failures(records: pd.DataFrame) -> pd.DataFrame:
    """The runs of the latest study whose check is not ``PASS`` (one row per run)."""
    table = latest_runs(records)
    return sort_configurations(table[table["check"] != "PASS"])
