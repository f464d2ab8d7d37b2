"""The documentation works: tutorials execute, the site builds strictly, the quick start runs.

- every ``tutorials/*.ipynb`` is re-executed from scratch (stored outputs are not trusted) with a kernel that
  runs *this* interpreter, and any cell error fails the test;
- ``mkdocs build --strict`` succeeds (broken links, anchors and nav entries are warnings in ``mkdocs.yml``, so
  they fail it);
- the ```python blocks of ``docs/index.md`` and ``README.md`` run, in order, in a fresh interpreter.

The notebook and quick-start code run in separate processes because they call ``dp.enable_features``, a
process-wide setting that must not leak into the other tests.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
NOTEBOOKS = sorted((ROOT / "tutorials").glob("*.ipynb"))
#: Seconds allowed per notebook cell (the tutorials are meant to run in well under 30 s in total).
CELL_TIMEOUT = 600


def _python_blocks(markdown: str) -> list[str]:
    """The bodies of the fenced ```python blocks of a Markdown text, in order."""
    return re.findall(r"^```python[ \t]*\n(.*?)^```[ \t]*$", markdown, flags=re.MULTILINE | re.DOTALL)


# --------------------------------------------------------------------------------------------------------
# tutorials
# --------------------------------------------------------------------------------------------------------
def test_tutorials_exist() -> None:
    assert NOTEBOOKS, f"no notebook found in {ROOT / 'tutorials'}"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_tutorial_outputs_are_stored(path: Path) -> None:
    """The committed notebook was executed top to bottom and stores no error output."""
    nbformat = pytest.importorskip("nbformat")
    nb = nbformat.read(path, as_version=4)
    code_cells = [c for c in nb.cells if c.cell_type == "code"]
    counts = [c.execution_count for c in code_cells]
    assert all(isinstance(n, int) for n in counts), f"{path.name}: unexecuted cells (counts {counts})"
    assert counts == list(range(1, len(counts) + 1)), f"{path.name}: not run in order (counts {counts})"
    errors = [o for c in code_cells for o in c.get("outputs", []) if o.get("output_type") == "error"]
    assert not errors, f"{path.name}: stored error output {errors[0].get('ename')}: {errors[0].get('evalue')}"


@pytest.mark.slow
@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_tutorial_executes(path: Path, tmp_path: Path) -> None:
    """Execute the notebook afresh, in its own folder, on a kernel running this interpreter."""
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    pytest.importorskip("ipykernel")
    from ipykernel.kernelspec import write_kernel_spec
    from jupyter_client.kernelspec import KernelSpecManager
    from jupyter_client.manager import KernelManager

    # A private kernelspec for sys.executable, so that the kernel sees the same environment (and installed
    # opendp_wgm) as the tests, whatever "python3" kernel the machine has registered.
    kernels = tmp_path / "kernels"
    write_kernel_spec(path=str(kernels / "python3"))
    specs = KernelSpecManager(kernel_dirs=[str(kernels)])
    km = KernelManager(kernel_name="python3", kernel_spec_manager=specs)

    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:  # start from a clean notebook: nothing stored is trusted
        if cell.cell_type == "code":
            cell.outputs = []
            cell.execution_count = None
    client = nbclient.NotebookClient(
        nb,
        km=km,
        timeout=CELL_TIMEOUT,
        resources={"metadata": {"path": str(path.parent)}},
    )
    try:
        # cleanup_kc: shut the kernel down when done; a kernel manager passed in is otherwise left running, with its
        # memory (and the 04_engines tutorial's JVM), until the test process exits
        client.execute(cleanup_kc=True)
    except nbclient.exceptions.CellExecutionError as err:  # the message holds the cell and its traceback
        pytest.fail(f"{path.name}: a cell raised\n{err}", pytrace=False)


# --------------------------------------------------------------------------------------------------------
# docs site
# --------------------------------------------------------------------------------------------------------
def test_mkdocs_build_strict(tmp_path: Path) -> None:
    if importlib.util.find_spec("mkdocs") is None:
        pytest.skip("mkdocs is not installed (pip install -e '.[docs]'); the docs site cannot be built")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "--config-file",
            str(ROOT / "mkdocs.yml"),
            "--site-dir",
            str(tmp_path / "site"),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,  # the failure is reported below with mkdocs' output
    )
    assert result.returncode == 0, f"mkdocs build --strict failed:\n{result.stdout}\n{result.stderr}"
    assert (tmp_path / "site" / "index.html").is_file()


# --------------------------------------------------------------------------------------------------------
# quick start
# --------------------------------------------------------------------------------------------------------
@pytest.mark.slow
@pytest.mark.parametrize("page", ["docs/index.md", "README.md"])
def test_quick_start_runs(page: str, tmp_path: Path) -> None:
    """The ```python blocks of a page, concatenated in order, run without error."""
    path = ROOT / page
    if not path.is_file():
        pytest.skip(f"{page} does not exist")
    blocks = _python_blocks(path.read_text(encoding="utf-8"))
    assert blocks, f"{page} has no ```python block"
    quick_start = blocks[0]
    assert "make_wgm_from_budget" in quick_start and "calibrate_wgm" in quick_start, f"{page}: no quick start"
    script = tmp_path / "quick_start.py"
    script.write_text("\n\n".join(blocks), encoding="utf-8")
    result = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=300, check=False
    )
    assert result.returncode == 0, f"{page} code failed:\n{result.stdout}\n{result.stderr}"


def test_python_blocks_extraction() -> None:
    text = "intro\n```python\na = 1\n```\n\n```bash\nls\n```\n```python\nb = a + 1\n```\n"
    assert _python_blocks(text) == ["a = 1\n", "b = a + 1\n"]
