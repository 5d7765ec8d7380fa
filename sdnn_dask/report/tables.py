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

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

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


def _natural(text: str) -> tuple:
    """A sort key that reads the numbers in ``text`` as numbers: ``net-480`` before
    ``net-1920`` (as text, ``1920`` sorts first)."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part)
                 for part in re.split(r"(\d+)", text) if part)


def sort_configurations(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` sorted as a reader expects: per problem, serial first, then data, model,
    hybrid; within a strategy by workers, partition and transport (stable otherwise).

    Problems come in numeric order of their size, ``neurons`` then ``layers`` (where the
    table has them), then the network's name with its numbers read as numbers, then
    ``inputs``: 1024-120, 1024-480, 1024-1920, not the text order 1024-120, 1024-1920,
    1024-480."""
    if table.empty:
        return table
    names = table["network"].astype(str)
    size = {c: pd.to_numeric(table[c], errors="coerce").fillna(-1).to_numpy()
            if c in table else 0 for c in ("neurons", "layers")}
    natural = {name: i for i, name in enumerate(sorted(set(names), key=_natural))}
    keys = pd.DataFrame({
        "n": size["neurons"], "l": size["layers"], "network": names.map(natural),
        "inputs": table["inputs"],
        "s": rank(table["strategy"], STRATEGY_ORDER), "t": rank(table["transport"],
                                                                  TRANSPORT_ORDER),
        "w": table["workers"], "r": table["row_groups"] if "row_groups" in table else 1,
        "p": rank(table["partition"], PARTITION_ORDER),
    }, index=table.index)
    order = keys.sort_values(["n", "l", "network", "inputs", "s", "t", "w", "r", "p"],
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

#: What the reports say where a configuration ran once: one time has no spread, so it
#: cannot tell a real lead from the machine's noise.
ONE_REPEAT = "one repeat: no spread to compare; run with --repeat 3"


def _ratio(value: float) -> str:
    return f"{value:.2f}x"


def capitalised(text: str) -> str:
    """``text`` with its first letter upper case (a sentence that starts with a name)."""
    return text[:1].upper() + text[1:]


def family_name(strategy: str) -> str:
    """A strategy as a sentence names it: ``data parallelism``, ``the serial kernel``."""
    return _FAMILY.get(strategy, strategy)


def name(row: Mapping) -> str:
    """A configuration as a sentence names it: ``data parallelism (hash, 2 workers)``,
    ``the serial kernel``, ``the serial kernel (dedup off)``."""
    strategy = str(row["strategy"])
    who = _FAMILY.get(strategy, strategy)
    if strategy not in SERIAL:
        return f"{who} ({describe(row)})"
    return who + (" (dedup off)" if str(row.get("dedup", "")) == "off" else "")


def seconds_text(value: float) -> str:
    """Seconds for a sentence: three significant digits (``0.210``, ``12.3``), one decimal
    from 100 s (``137.3``)."""
    return f"{value:.1f}" if abs(value) >= 100 else f"{value:#.3g}"


def range_text(row: Mapping) -> str:
    """A configuration's seconds over its repeats, ``0.21-0.25 s`` (its fastest and slowest
    repeat); ``0.21 s`` where it ran once."""
    if int(row["repeats"]) <= 1:
        return f"{seconds_text(float(row['seconds']))} s"
    return f"{seconds_text(float(row['seconds_min']))}-{seconds_text(float(row['seconds_max']))} s"


@dataclass(frozen=True)
class Verdict:
    """What the repeats allow a report to say about which configuration is fastest.

    Attributes
    ----------
    kind
        ``"fastest"``: the least median's slowest repeat is faster than the runner-up's
        fastest (their spreads do not overlap); ``"noise"``: they overlap, so the
        configurations whose spread reaches the leader's are within noise of each other;
        ``"one repeat"``: the leader or the runner-up ran once, so there is no spread to
        compare (:data:`ONE_REPEAT`); ``"alone"``: one configuration, nothing to compare.
    rows
        ``fastest`` and ``one repeat``: the leader and the runner-up; ``noise``: the leader
        and every configuration within noise of it, by median; ``alone``: the one row. The
        index is the one of the rows given to :func:`verdict`.
    """

    kind: str
    rows: pd.DataFrame

    @property
    def lead(self) -> pd.Series:
        """The configuration with the least median seconds."""
        return self.rows.iloc[0]

    def repeats_text(self) -> str:
        """``over 3 repeats`` (``over 3, 3 and 2 repeats`` where the counts differ)."""
        counts = [str(int(n)) for n in self.rows["repeats"]]
        if len(set(counts)) == 1:
            return f"over {counts[0]} repeats"
        return f"over {', '.join(counts[:-1])} and {counts[-1]} repeats"

    def noise_text(self, names: Sequence[str] | None = None) -> str:
        """``a and b are within noise: 0.21-0.25 s against 0.22-0.27 s over 3 repeats``
        (``names``: how to call the rows; default :func:`name`)."""
        names = list(names) if names is not None else [name(r) for _, r in
                                                       self.rows.iterrows()]
        ranges = [range_text(r) for _, r in self.rows.iterrows()]
        return (f"{_and(names)} are within noise: {ranges[0]} against {_and(ranges[1:])} "
                f"{self.repeats_text()}")


def _and(words: Sequence[str]) -> str:
    words = list(words)
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


def verdict(ok: pd.DataFrame) -> Verdict:
    """Which of ``ok``'s configurations the repeats show to be fastest, if any.

    The configuration with the least median (``seconds``) is called fastest only where
    its spread over the repeats (``seconds_min`` to ``seconds_max``) does not overlap the
    runner-up's (the next least median): its slowest repeat beat the runner-up's fastest.
    Otherwise every configuration whose fastest repeat is no slower than the leader's
    slowest is within noise of it. One repeat of either has no spread: it decides nothing.

    Parameters
    ----------
    ok
        Rows of a :func:`comparison` (``seconds``, ``seconds_min``, ``seconds_max``,
        ``repeats``), passing ones: a failed run is never fastest.

    Returns
    -------
    Verdict

    Raises
    ------
    ValueError
        When ``ok`` is empty.
    """
    if ok.empty:
        raise ValueError("no configuration to compare")
    ranked = ok.sort_values("seconds", kind="stable")
    if len(ranked) == 1:
        return Verdict("alone", ranked)
    lead, runner = ranked.iloc[0], ranked.iloc[1]
    if int(lead["repeats"]) <= 1 or int(runner["repeats"]) <= 1:
        return Verdict("one repeat", ranked.iloc[:2])
    if float(lead["seconds_max"]) < float(runner["seconds_min"]):
        return Verdict("fastest", ranked.iloc[:2])
    within = ranked["seconds_min"].astype(float) <= float(lead["seconds_max"])
    return Verdict("noise", ranked[within])


def headline(cmp: pd.DataFrame) -> str:
    """The story of one problem's :func:`comparison` rows, in a few sentences.

    Which passing configuration is fastest, where the repeats show it (:func:`verdict`:
    its spread clear of the runner-up's), with its rate and how it compares with the
    serial kernel and with data parallelism on the same workers; else which ones are
    within noise of each other, or that one repeat cannot tell (:data:`ONE_REPEAT`). Then
    the best configuration (least median) of each other parallel strategy, with the MB
    it moved; configurations that failed the check are counted first and never called
    fastest.
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

    def rate(row: pd.Series) -> str:
        bits = versus(row)
        return (f"{row['edges_per_s']:.3g} edges/s" + (f", {' and '.join(bits)}" if bits
                                                        else "") + moved(row))

    found = verdict(ok)
    lead = found.lead
    if found.kind == "fastest":
        runner = found.rows.iloc[1]
        sentences.append(f"{capitalised(name(lead))} is fastest: {rate(lead)}; its repeats "
                         f"{range_text(lead)}, the runner-up's ({name(runner)}) "
                         f"{range_text(runner)}.")
    elif found.kind == "alone":
        sentences.append(f"{capitalised(name(lead))} is the only configuration that passed: "
                         f"{rate(lead)}.")
    elif found.kind == "noise":
        sentences.append(capitalised(found.noise_text()) + ".")
    else:
        sentences.append(f"{capitalised(ONE_REPEAT)}. Least seconds: {name(lead)}, "
                         f"{rate(lead)}.")
    said = lead["strategy"] if found.kind in ("fastest", "alone", "one repeat") else None
    for strategy in PARALLEL:
        family = ok[ok["strategy"] == strategy]
        if family.empty or strategy == said:
            continue
        best = family.loc[family["seconds"].idxmin()]
        bits = versus(best)
        reach = (f" reaches {' and '.join(bits)}" if bits
                 else f" runs at {best['edges_per_s']:.3g} edges/s")
        sentences.append(f"{capitalised(_FAMILY[strategy])} at best "
                         f"({describe(best)}){reach}{moved(best)}.")
    if found.kind == "fastest" and lead["strategy"] in SERIAL \
            and (ok["strategy"].isin(PARALLEL)).any():
        sentences.append("No parallel configuration beats the serial "
                         f"{lead['strategy']} here.")
    return " ".join(sentences)


def failures(records: pd.DataFrame) -> pd.DataFrame:
    """The runs of the latest study whose check is not ``PASS`` (one row per run)."""
    table = latest_runs(records)
    return sort_configurations(table[table["check"] != "PASS"])
