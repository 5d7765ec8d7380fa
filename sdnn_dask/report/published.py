"""Measured runs beside the challenge's published figures (times for all 60000 inputs).

The figures are those quoted in the challenge notes (``docs/`` of the shared challenge
material): SuiteSparse:GraphBLAS on one and 40 threads (Davis's ``dnn_summary.tex``),
DistSparseDNN on 896 cores (Mofrad et al., HPEC 2020) and SNICIT on one GPU (ICPP 2023,
Table 3). They were measured on other machines and, for SNICIT, with approximate
(clustered) deep layers; they are context, not targets. :func:`beside_published` puts
the median seconds and edges/s of each size and strategy of a records table next to them.
"""

from __future__ import annotations

import pandas as pd

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


def published_table() -> pd.DataFrame:
    """:data:`PUBLISHED` as a table (seconds for 60000 inputs)."""
    return pd.DataFrame(PUBLISHED, columns=["system", "hardware", "neurons", "layers",
                                            "seconds"])


def beside_published(records: pd.DataFrame) -> pd.DataFrame:
    """Median seconds and edges/s per size and strategy, beside the published seconds.

    Parameters
    ----------
    records
        Run records (:func:`sdnn_dask.records.read_records`); the reference and runs
        that did not PASS are left out. Published seconds are for 60000 inputs: they are
        shown where a size's runs had 60000 inputs too, else left empty.

    Returns
    -------
    pandas.DataFrame
        One row per (neurons, layers, strategy, dedup): ``inputs``, ``seconds``,
        ``edges_per_s``, ``runs``, then one column of seconds per published system
        (:data:`SYSTEMS`), empty where it published none for the size.
    """
    runs = records[(records["strategy"] != "reference") & (records["check"] == "PASS")]
    runs = runs.drop_duplicates("run_id") if "run_id" in runs else runs
    keys = ["neurons", "layers", "strategy", "dedup"]
    table = (runs.groupby(keys, sort=True)
             .agg(inputs=("inputs", "max"), seconds=("wall_s", "median"),
                  edges_per_s=("edges_per_s", "median"), runs=("wall_s", "size"))
             .reset_index())
    wide = published_table().pivot_table(index=["neurons", "layers"], columns="system",
                                         values="seconds").reindex(columns=SYSTEMS)
    table = table.merge(wide.reset_index(), on=["neurons", "layers"], how="left")
    table.loc[table["inputs"] != 60000, SYSTEMS] = float("nan")
    return table


def format_published(table: pd.DataFrame) -> str:
    """:func:`beside_published`'s table as text, seconds to three significant digits."""
    shown = table.copy()
    shown.insert(0, "network", [f"{n}-{layers}" for n, layers in
                                zip(shown.pop("neurons"), shown.pop("layers"), strict=True)])
    for column in ["seconds", *SYSTEMS]:
        shown[column] = [f"{v:.3g}" if pd.notna(v) else "" for v in shown[column]]
    shown["edges_per_s"] = [f"{v:.3g}" for v in shown["edges_per_s"]]
    note = ("seconds for all inputs (published: 60000 inputs, other machines; SNICIT "
            "clusters the deep layers approximately)")
    return note + "\n" + shown.to_string(index=False)
