"""The guides' Python code blocks run as written: the docs site's guides, the README and the packages' READMEs.

Each ```python block is one test, run in a fresh interpreter in a temporary folder (so the packages come
from the environment, never from the repository). A block whose first line names a file (`# sum.py`) is
a script the guide then starts: it is written under that name and run the way the guide runs it (the
first `poprun ... python sum.py` line, else `python sum.py`). Excerpts are not run: a block with a line
that is just `...` (code left out), and the README's block importing `mymodel`, the reader's own module.
`nox -s docs` runs this file.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GUIDES = [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md", *sorted((ROOT / "packages").glob("*/README.md"))]
BLOCK = re.compile(r"^```python\n(.*?)^```", re.MULTILINE | re.DOTALL)
SCRIPT_NAME = re.compile(r"#\s*([\w-]+\.py)\s*$")
EXCERPT_REASONS = {
    re.compile(r"^\s*\.\.\.\s*$", re.MULTILINE): "an excerpt: code left out as `...`",
    re.compile(r"^from mymodel import|^import mymodel", re.MULTILINE): "imports mymodel, the reader's own module",
}
TIMEOUT_S = 300


def _blocks() -> list[pytest.ParameterSet]:
    params = []
    for guide in GUIDES:
        text = guide.read_text()
        for match in BLOCK.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            code = match.group(1)
            marks = [pytest.mark.skip(reason=why) for pattern, why in EXCERPT_REASONS.items() if pattern.search(code)]
            ident = f"{guide.relative_to(ROOT)}:{line}"
            params.append(pytest.param(guide, code, id=ident, marks=marks[:1]))
    return params


def _command(guide: Path, script: str) -> list[str]:
    """How the guide runs `script`: its first `poprun ... python script` line, else python itself."""
    for line in guide.read_text().splitlines():
        words = shlex.split(line) if line.startswith("poprun ") else []
        if words[-2:] == ["python", script]:
            return [sys.executable, "-m", "popdist.launcher", *words[1:-2], sys.executable, script]
    return [sys.executable, script]


@pytest.mark.parametrize(("guide", "code"), _blocks())
def test_guide_block_runs(guide: Path, code: str, tmp_path: Path) -> None:
    first = code.splitlines()[0] if code.strip() else ""
    named = SCRIPT_NAME.fullmatch(first.strip())
    script = named.group(1) if named else "block.py"
    (tmp_path / script).write_text(code)
    command = _command(guide, script) if named else [sys.executable, script]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env |= {"JAX_PLATFORMS": "cpu", "POPRUN_MPI": "off", "MPLBACKEND": "Agg"}
    result = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=TIMEOUT_S, check=False
    )
    assert result.returncode == 0, f"{' '.join(command)} exited {result.returncode}:\n{result.stdout}\n{result.stderr}"


def test_guides_have_blocks_to_run() -> None:
    runnable = [p for p in _blocks() if not p.marks]
    assert len(runnable) >= 3, [p.id for p in runnable]
