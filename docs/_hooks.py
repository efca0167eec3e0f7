"""MkDocs hook: the notebook lives in examples/ beside the other examples; the site shows it under examples/."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from mkdocs.plugins import event_priority
from mkdocs.structure.files import File, Files

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = ["examples/batch_serialisation.ipynb"]


@event_priority(100)  # before mkdocs-jupyter's on_files, which turns .ipynb files into pages
def on_files(files: Files, config: Any) -> Files:
    for name in NOTEBOOKS:
        files.append(File(name, str(ROOT), config["site_dir"], config["use_directory_urls"]))
    return files
