"""examples/batch_serialisation.ipynb runs from top to bottom without an error, and draws its chart.

`nox -s notebook` runs this file on a copy of the notebook, leaving the file as committed;
`nox -s notebook -- --write` saves the outputs into it (the docs site shows the saved outputs, without
running the notebook again).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOK = Path(__file__).resolve().parents[1] / "examples" / "batch_serialisation.ipynb"
CELL_TIMEOUT_S = 300


def test_notebook_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("JAX_PLATFORMS", "cpu")
    monkeypatch.delenv("PYTHONPATH", raising=False)
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    # Runs in a temporary folder: the packages come from the environment, not from the repository.
    client = NotebookClient(
        notebook, timeout=CELL_TIMEOUT_S, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    )
    start = time.perf_counter()
    client.execute()  # raises CellExecutionError, with the cell and its traceback, on an error
    elapsed = time.perf_counter() - start
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert code and all(cell.execution_count for cell in code)
    outputs = [output for cell in code for output in cell.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert any("image/png" in o.get("data", {}) for o in outputs), "the chart was not drawn"
    print(f"{len(code)} code cells of {len(notebook.cells)} ran in {elapsed:.1f} s")
    if os.environ.get("NOTEBOOK_WRITE") == "1":
        for cell in code:  # outputs kept, but no run-specific metadata to churn the diff
            cell.metadata.pop("execution", None)
        nbformat.write(notebook, NOTEBOOK)
