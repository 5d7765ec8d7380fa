"""Every strategy at every challenge size, beside the challenge's published figures.

The figures are those quoted in the challenge notes (``docs/`` of the shared challenge
material): SuiteSparse:GraphBLAS on one and 40 threads (Davis's ``dnn_summary.tex``),
DistSparseDNN on 896 cores (Mofrad et al., HPEC 2020) and SNICIT on one GPU (ICPP 2023,
Table 3). They were measured on other machines and, for SNICIT, with approximate
(clustered) deep layers; they are context, not targets.

:func:`beside_published` makes one row per size (neurons, layers, inputs) and
configuration (kernel, data parallelism, model parallelism per neuron partition, the
hybrid), sizes in numeric order: its seconds over the repeats, the bytes it moved, its
largest worker's peak memory, what its parts waited, and the published seconds of the
size. :func:`size_sentence` says per size which strategy won and why (compute,
communication or memory), and only where the repeats show it (the rule of
:func:`sdnn_dask.report.tables.verdict`); :func:`format_published` prints both.
"""

from __future__ import annotations

import pandas as pd

from ..formatting import to_text
from .tables import (
    CONFIG,
    ONE_REPEAT,
    Verdict,
    capitalised,
    describe,
    family_name,
    name,
    range_text,
    runs,
    seconds_text,
    sort_configurations,
    verdict,
    with_spread,
)

#: ``(system, hardware, neurons, layers, seconds)`` for 60000 inputs.
PUBLISHED: list[tuple[str, str, int, int, float]] = [
    ("GraphBLAS 1 thread", "Xeon E5-2698v4, 1 core", 1024, 120, 24.2),
    ("GraphBLAS 1 thread", "Xeon E5-2698v4, 1 core", 16384, 1920, 10407.0),
    ("GraphBLAS 1 thread", "Xeon E5-2698v4, 1 core", 65536, 1920, 65492.0),
    ("GraphBLAS 40 threads", "Xeon E5-2698v4, 20 cores", 1024, 120, 1.4),
    ("GraphBLAS 40 threads", "Xeon E5-2698v4, 20 cores", 16384, 1920, 505.0),
    ("GraphBLAS 40 threads", "Xeon E5-2698v4, 20 cores", 65536, 1920, 3743.0),
    ("DistSparseDNN", "32 nodes, 896 cores", 65536, 1920, 51.0),
    ("SNICIT", "1 RTX A6000", 1024, 120, 0.0134),
    ("SNICIT", "1 RTX A6000", 4096, 1920, 0.0893),
    ("SNICIT", "1 RTX A6000", 16384, 1920, 0.179),
    ("SNICIT", "1 RTX A6000", 65536, 1920, 0.689),
]

#: The published systems, in the order of the table's columns.
SYSTEMS = list(dict.fromkeys(system for system, *_ in PUBLISHED))

#: What makes a size: the table's rows and sentences are per size.
SIZE = ["neurons", "layers", "inputs"]

#: The strategies a size's sentence compares, each by its best configuration.
STRATEGIES = ("kernel", "data", "model", "hybrid")

#: The columns of :func:`beside_published`, before the published ones.
COLUMNS = [*SIZE, "network", "strategy", "partition", "row_partition", "transport",
           "workers", "blocks", "parts", "row_groups", "weights", "dedup", "repeats", "seconds",
           "seconds_min", "seconds_max", "edges_per_s", "compute_s", "mb_moved", "wait_s",
           "peak_gb"]

#: What the columns mean (printed under the table).
NOTES = {
    "seconds": "median over the repeats (fastest-slowest repeat)",
    "compute_s": "the busiest block's seconds in the kernel (a part: its steps), median",
    "mb_moved": "MB of activations moved between workers, median (data parallelism and "
                "the kernel exchange none between layers: 0)",
    "wait_s": "model and hybrid, direct transport: the most waiting part's seconds "
              "waiting for pieces, summed over the layers, median (blank: not recorded)",
    "peak_gb": "the largest worker's peak resident memory, GB, the largest over the "
               "repeats (blank: not recorded)",
}


def published_table() -> pd.DataFrame:
    """:data:`PUBLISHED` as a table (seconds for 60000 inputs)."""
    return pd.DataFrame(PUBLISHED, columns=["system", "hardware", "neurons", "layers",
                                            "seconds"])


def _per_run(records: pd.DataFrame, layers: pd.DataFrame | None) -> pd.DataFrame:
    """One row per run (:func:`sdnn_dask.report.tables.runs`) with its largest worker's
    peak memory (``peak``) and its most waiting part's seconds waiting (``wait``)."""
    table = runs(records)
    peak = records.groupby("run_id", sort=False)["peak_rss_bytes"].max()  # NaN: unknown
    table["peak"] = table["run_id"].map(peak).astype(float)
    table["wait"] = float("nan")
    if layers is not None and len(layers) and "wait_s" in layers:
        mine = layers[layers["run_id"].isin(table["run_id"])]
        per_part = mine.groupby(["run_id", "block"])["wait_s"].sum(min_count=1)
        table["wait"] = table["run_id"].map(per_part.groupby("run_id").max()).astype(float)
    return table


def beside_published(records: pd.DataFrame, layers: pd.DataFrame | None = None
                     ) -> pd.DataFrame:
    """Every configuration's seconds, bytes moved and peak memory per size, beside the
    published seconds.

    Parameters
    ----------
    records
        Run records (:func:`sdnn_dask.records.read_records`), every study in them; the
        serial reference and runs that did not PASS their check are left out (a failed
        run's time is no yardstick).
    layers
        Their layer records, for what model-parallel parts waited (``wait_s``); optional.

    Returns
    -------
    pandas.DataFrame
        One row per size (neurons, layers, inputs) and configuration, sizes in numeric
        order and, within one, the kernel, data, model and hybrid configurations: the
        columns :data:`COLUMNS` (explained in :data:`NOTES`), then one column of seconds
        per published system (:data:`SYSTEMS`), empty where it published none for the
        size or the size's runs had other than the published 60000 inputs.
    """
    table = _per_run(records, layers)
    table = table[(table["strategy"] != "reference") & (table["check"] == "PASS")]
    keys = [*SIZE, *[c for c in CONFIG if c not in SIZE]]
    out = (table.groupby(keys, sort=False, dropna=False)
           .agg(repeats=("run_id", "count"), seconds=("wall_s", "median"),
                seconds_min=("wall_s", "min"), seconds_max=("wall_s", "max"),
                edges_per_s=("edges_per_s", "median"), compute_s=("max_block_s", "median"),
                mb_moved=("bytes_moved", lambda b: b.median() / 1e6),
                wait_s=("wait", "median"), peak_gb=("peak", lambda p: p.max() / 1e9))
           .reset_index())
    # the kernel and data parallelism exchange no activations between layers
    serial_or_data = out["strategy"].astype(str).isin(["kernel", "data"])
    out["mb_moved"] = out["mb_moved"].mask(serial_or_data & out["mb_moved"].isna(), 0.0)
    wide = published_table().pivot_table(index=["neurons", "layers"], columns="system",
                                         values="seconds").reindex(columns=SYSTEMS)
    out = out.merge(wide.reset_index(), on=["neurons", "layers"], how="left")
    out.loc[out["inputs"] != 60000, SYSTEMS] = float("nan")
    return sort_configurations(out[[*COLUMNS, *SYSTEMS]])


def _sizes(table: pd.DataFrame) -> list[tuple[tuple[int, int, int], pd.DataFrame]]:
    """``table`` split by size, in its (numeric) order."""
    keys = list(dict.fromkeys(zip(*(table[c].astype(int) for c in SIZE), strict=True)))
    return [(key, table[(table["neurons"] == key[0]) & (table["layers"] == key[1])
                        & (table["inputs"] == key[2])].reset_index(drop=True))
            for key in keys]


def size_label(key: tuple[int, int, int]) -> str:
    """``1024-120 x 60000``: neurons-layers x inputs."""
    return f"{key[0]}-{key[1]} x {key[2]}"


def _streamed(row: pd.Series) -> bool:
    return "streamed" in str(row["weights"])


def _mb(value: object) -> str:
    """MB for a sentence: ``431.7``, ``1,234.5``; three significant digits below 10."""
    mb = float(value)  # type: ignore[arg-type]
    return "0" if mb == 0 else f"{mb:,.1f}" if abs(mb) >= 10 else f"{mb:#.3g}"


def why(winner: pd.Series, loser: pd.Series) -> str:
    """Why ``winner`` beat ``loser``, in one of three words and the figures behind it.

    ``memory``: the loser streamed its weights from a store, the winner held them;
    otherwise the time between them is split into compute (each one's busiest block in
    the kernel, ``compute_s``) and the rest (``seconds - compute_s``: moving activations
    or blocks, waiting for pieces, scheduling): ``compute`` where the compute gap is
    the larger, ``communication`` where the rest is, with the bytes the loser moved and
    what its parts waited where recorded.
    """
    if _streamed(loser) and not _streamed(winner):
        return (f"memory ({name(loser)} streamed its weights from the store, "
                f"{name(winner)} held them)")
    compute = float(loser["compute_s"]) - float(winner["compute_s"])
    rest = ((float(loser["seconds"]) - float(loser["compute_s"]))
            - (float(winner["seconds"]) - float(winner["compute_s"])))
    if pd.isna(compute) or pd.isna(rest) or compute >= rest:
        return (f"compute (its busiest block computed for "
                f"{seconds_text(float(winner['compute_s']))} s against "
                f"{seconds_text(float(loser['compute_s']))} s)")
    said = [f"{seconds_text(float(loser['seconds'] - loser['compute_s']))} s outside its "
            f"kernel against {seconds_text(float(winner['seconds'] - winner['compute_s']))} s"]
    if pd.notna(loser["mb_moved"]) and float(loser["mb_moved"]) > 0:
        said.append(f"moving {_mb(loser['mb_moved'])} MB against "
                    f"{_mb(winner['mb_moved'])} MB")
    if pd.notna(loser["wait_s"]):
        said.append(f"its parts waiting up to {seconds_text(float(loser['wait_s']))} s for "
                    "pieces")
    return f"communication ({name(loser)}: {', '.join(said)})"


def size_verdict(rows: pd.DataFrame) -> Verdict | None:
    """:func:`sdnn_dask.report.tables.verdict` over one size's strategies, each
    (:data:`STRATEGIES`) by its configuration of least median seconds; ``None`` for no
    rows."""
    bests = []
    for strategy in STRATEGIES:
        family = rows[rows["strategy"].astype(str) == strategy]
        if len(family):
            bests.append(family.loc[family["seconds"].idxmin()])
    return verdict(pd.DataFrame(bests).reset_index(drop=True)) if bests else None


def size_sentence(rows: pd.DataFrame, missing: dict[str, str] | None = None) -> str:
    """One size's verdict: which strategy won and why, where the repeats show it.

    Each strategy (:data:`STRATEGIES`) stands by its configuration of least median
    seconds. The strategy whose best is fastest won only where its spread over the repeats
    is clear of the runner-up strategy's (:func:`sdnn_dask.report.tables.verdict`); the
    sentence then says why (:func:`why`). Where they overlap it says which are within
    noise; on one repeat, that it cannot tell (:data:`sdnn_dask.report.tables.ONE_REPEAT`).

    Parameters
    ----------
    rows
        One size's rows of :func:`beside_published`.
    missing
        Strategies with no passing run at this size, each with what happened (``did not
        run``, ``failed its check``): said as memory, the reason a strategy is left out or
        stopped at a size (when a run fails, the sentence says so instead).
    """
    found = size_verdict(rows)
    said = []
    if found is None:
        said.append("no run passed")
    else:
        lead = found.lead
        if found.kind == "alone":
            said.append(f"only {name(lead)} ran, {range_text(lead)}")
        elif found.kind == "one repeat":
            runner = found.rows.iloc[1]
            said.append(f"{ONE_REPEAT} (least seconds: {name(lead)}, {range_text(lead)}, "
                        f"against {name(runner)}, {range_text(runner)})")
        elif found.kind == "noise":
            said.append(found.noise_text())
        else:
            runner = found.rows.iloc[1]
            said.append(f"{name(lead)} won, {range_text(lead)} against {name(runner)}'s "
                        f"{range_text(runner)} {found.repeats_text()}: {why(lead, runner)}")
    for strategy, what in (missing or {}).items():
        where = "memory: " if what == "did not run" else ""
        said.append(f"{where}{family_name(strategy)} {what} at this size")
    return capitalised("; ".join(said)) + "."


def _missing(table: pd.DataFrame, records: pd.DataFrame) -> dict[tuple, dict[str, str]]:
    """Per size of ``table``: the strategies that ran at some size of it but have no
    passing run at this one, ``did not run`` or ``failed its check``."""
    tried = records.drop_duplicates("run_id")
    seen = [s for s in STRATEGIES if (table["strategy"].astype(str) == s).any()
            or (tried["strategy"].astype(str) == s).any()]
    out = {}
    for key, rows in _sizes(table):
        here = set(rows["strategy"].astype(str))
        size = tried[(tried["neurons"] == key[0]) & (tried["layers"] == key[1])
                     & (tried["inputs"] == key[2])]
        ran = set(size["strategy"].astype(str))
        out[key] = {s: "failed its check" if s in ran else "did not run"
                    for s in seen if s not in here}
    return out


def sentences(table: pd.DataFrame, records: pd.DataFrame | None = None
              ) -> list[tuple[tuple[int, int, int], str]]:
    """``(size, sentence)`` for each size of a :func:`beside_published` table, in its
    order (:func:`size_sentence`); ``records``, the table's source, tell apart a strategy
    that failed its check at a size from one that did not run there."""
    missing = _missing(table, records if records is not None else table.assign(
        run_id=range(len(table))))
    return [(key, size_sentence(rows, missing[key])) for key, rows in _sizes(table)]


def format_published(table: pd.DataFrame, records: pd.DataFrame | None = None) -> str:
    """:func:`beside_published`'s table as text: per size, its published seconds, then a
    row per configuration (seconds with their spread, MB moved, the largest worker's
    peak GB), then the size's sentence (:func:`sentences`); the columns' notes last."""
    out = ["Every strategy per size (seconds for all inputs; published: 60000 inputs, "
           "other machines; SNICIT clusters the deep layers approximately)"]
    said = dict(sentences(table, records))
    for key, rows in _sizes(table):
        published = [f"{system} {rows[system].iat[0]:.3g} s" for system in SYSTEMS
                     if pd.notna(rows[system].iat[0])]
        out += ["", f"{size_label(key)}: published "
                + (", ".join(published) if published else "none for this size")]
        shown = with_spread(rows)
        shown.insert(0, "configuration", [describe(r) if r["strategy"] == "kernel"
                                          else f"{r['strategy']} ({describe(r)})"
                                          for _, r in rows.iterrows()])
        columns = ["configuration", "seconds", "edges_per_s", "compute_s", "mb_moved",
                   "wait_s", "peak_gb"]
        if rows["wait_s"].isna().all():
            columns.remove("wait_s")
        out += [to_text(shown, columns), said[key]]
    out += ["", *(f"{c}: {n}" for c, n in NOTES.items())]
    return "\n".join(out)
