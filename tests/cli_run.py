"""Running the command line in-process, for the CLI tests: its exit code and stderr."""

from __future__ import annotations

from sdnn_dask.cli import main


def run(argv: list[str], capsys) -> tuple[int, str]:
    """``main(argv)``'s exit code (returned, or raised as argparse does) and its stderr."""
    try:
        code = main(argv)
    except SystemExit as exit_:
        code = exit_.code
    return code, capsys.readouterr().err


def one_error_line(err: str) -> str:
    """The message of an stderr that is exactly one ``error:`` line."""
    assert err.startswith("error: ") and err.endswith("\n") and err.count("\n") == 1, err
    return err
