"""The documentation works: tutorials execute, the site builds strictly, every documented example runs.

- every ``tutorials/*.ipynb`` is re-executed from scratch (stored outputs are not trusted) with a kernel that
  runs *this* interpreter, and any cell error fails the test;
- ``mkdocs build --strict`` succeeds (broken links, anchors and nav entries are warnings in ``mkdocs.yml``, so
  they fail it);
- every fenced code block of ``README.md`` and ``docs/*.md`` in Python (```python) or shell (```bash, ```sh,
  ```shell, ```console: its ``$ `` lines) runs. A page's Python blocks run in order in one fresh interpreter
  (a block may use an earlier one's names); each shell block runs alone through ``bash -e -o pipefail``, with
  ``opendp-wgm`` and ``python`` on ``PATH`` running *this* interpreter on *this* checkout. Other blocks
  (```text, outputs) are not run.

Both kinds run in a temporary folder holding what the examples assume (:func:`_prepare`): ``events.db``, an
SQLite database with a table ``events(user, item)``; ``events.csv``, ``events.parquet`` and
``events/part-0.parquet``, the same rows; ``benchmarks`` (a link to the checkout's) and a copy of
``tutorials``. The rows are ``wgm.datasets.synthetic_zipf(2_000, 10, seed=0)``.

A block that needs something this test does not have says so just before its fence, in a comment that the site
does not render::

    <!-- doc-test: needs spark "why, shown when skipped" -->
    <!-- doc-test: skip "pseudo-code" -->

``needs`` takes a comma-separated list of :data:`REQUIREMENTS`: the block runs where all of them are there and
is otherwise reported as a skipped test with its reason (a Python block left out of its page's run is one
too); ``skip`` never runs. Python blocks and shell blocks run in separate processes because the examples call
``dp.enable_features``, a process-wide setting that must not leak into the other tests.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import sqlite3
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
NOTEBOOKS = sorted((ROOT / "tutorials").glob("*.ipynb"))
#: Seconds allowed per notebook cell (the tutorials are meant to run in well under 30 s in total).
CELL_TIMEOUT = 600


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


def _api_hook() -> ModuleType:
    """``docs/hooks/api_reference.py``, the MkDocs hook that completes the API page (loaded from its path)."""
    spec = importlib.util.spec_from_file_location("api_reference", DOCS / "hooks" / "api_reference.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_api_page_names_every_public_name() -> None:
    """Once completed by the hook, a heading of the API page names each of ``opendp_wgm.__all__``; the names the
    hand-written page lacks get exactly one generated heading each, after it."""
    import opendp_wgm

    hook = _api_hook()
    page = (DOCS / "api.md").read_text(encoding="utf-8")
    missing = hook.undocumented(page)
    completed = hook.completed(page)
    assert set(opendp_wgm.__all__) <= hook.documented(completed)
    assert completed.startswith(page.rstrip())
    generated = completed[len(page.rstrip()) :]
    assert [line for line in generated.splitlines() if line.startswith("### ")] == [f"### `{n}`" for n in missing]
    assert hook.completed(completed) == completed  # nothing left to add


def test_api_hook_renders_a_numpy_docstring() -> None:
    """A public name without a section is rendered from its signature and numpy-style docstring: the sections as
    bold titles, the entries as a definition list, RST roles and ``.. math::`` as code, ``>>>`` lines fenced."""

    def make_toy(input_domain: object, *, scale: float = 1.0) -> object:
        """A toy release.

        The noise is :math:`\\sigma` per user (:func:`opendp_wgm.make_wgm`'s).

        .. math:: \\varepsilon = 1 / \\sigma

        .. math::
            \\rho = 1 / (2 \\sigma^2)

        Then the text goes on.

        Parameters
        ----------
        input_domain
            The input.
        scale : float
            σ > 0,
            the noise's scale.

        Returns
        -------
        Measurement
            The release.

        Examples
        --------
        >>> 1 + 1
        2
        """
        return input_domain

    text = _api_hook().render("make_toy", make_toy)
    lines = text.splitlines()
    assert lines[:3] == ["### `make_toy`", "", "```python"]
    assert lines[3] == "make_toy(input_domain: object, *, scale: float = 1.0) -> object"
    assert "(`opendp_wgm.make_wgm`'s)" in text and "`\\sigma`" in text
    assert "```text\n\\varepsilon = 1 / \\sigma\n```" in text
    assert "```text\n\\rho = 1 / (2 \\sigma^2)\n```\n\nThen the text goes on." in text  # an indented block
    assert "**Parameters**" in text and "**Returns**" in text
    assert "`scale` (float)\n:   σ > 0,\n    the noise's scale." in text
    assert "`Measurement`\n:   The release." in text
    assert "```pycon\n>>> 1 + 1\n2\n```" in text
    assert "----" not in text  # every underline became a title


def test_api_hook_renders_a_description_before_any_entry() -> None:
    """An entries section whose first line is indented (no entry name before it) still renders: the line opens a
    definition, and the site builds."""

    def make_odd() -> None:
        """Odd.

        Parameters
        ----------
            a description with no name
        """

    assert ":   a description with no name" in _api_hook().render("make_odd", make_odd)


# --------------------------------------------------------------------------------------------------------
# every documented example
# --------------------------------------------------------------------------------------------------------
PAGES = [ROOT / "README.md", *sorted(DOCS.glob("*.md"))]
PYTHON = ("python",)
SHELL = ("bash", "sh", "shell", "console")
#: Seconds allowed to one shell block, or to one page's Python blocks together.
BLOCK_TIMEOUT = 600
#: What a block may need (``<!-- doc-test: needs a, b "reason" -->``), and how to tell it is there.
REQUIREMENTS = {
    "spark": "pyspark and Java (the [spark] extra)",
    "tumult": "Tumult Core (the [tumult] extra, its own environment)",
    "data": "the shared data folder (../shared/data beside the checkout, or $OPENDP_WGM_DATA)",
    "long": "minutes to hours (set OPENDP_WGM_DOCS_LONG=1 to run it)",
    "server": "a server this test does not start",
    "install": "to install packages (a test never does)",
    "interactive": "a person at the keyboard",
}
_FENCE = re.compile(r"^```(?P<info>[^\n`]*)\n(?P<body>.*?)^```[ \t]*$", flags=re.MULTILINE | re.DOTALL)
_MARKER = re.compile(r'^<!-- doc-test: (?P<kind>needs|skip)(?P<names>[^"]*?)\s*(?:"(?P<reason>[^"]*)")?\s*-->$')


@dataclass(frozen=True)
class Block:
    """One fenced code block: its page, first line, language, body and marker (if any)."""

    page: Path
    line: int
    language: str
    body: str
    needs: tuple[str, ...] = ()
    skip: bool = False
    reason: str = ""

    @property
    def name(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line} {self.language}"


def _data_dir() -> Path:
    """The shared data folder, as tests/conftest.py's ``shared_data`` finds it."""
    return Path(os.environ.get("OPENDP_WGM_DATA", ROOT.parent / "shared" / "data")).expanduser()


def _absent(name: str) -> bool:
    """Whether the requirement ``name`` (a key of :data:`REQUIREMENTS`) is missing here."""
    if name == "spark":
        return importlib.util.find_spec("pyspark") is None or shutil.which("java") is None
    if name == "tumult":
        return importlib.util.find_spec("tmlt") is None
    if name == "data":
        return not _data_dir().is_dir()
    if name == "long":
        return os.environ.get("OPENDP_WGM_DOCS_LONG") != "1"
    return True  # server, install, interactive


def _blocks(page: Path, text: str | None = None) -> list[Block]:
    """The fenced code blocks of a page, in order, each with the doc-test marker on the line above its fence."""
    text = page.read_text(encoding="utf-8") if text is None else text
    blocks = []
    for fence in _FENCE.finditer(text):
        line = text.count("\n", 0, fence.start()) + 1
        above = text[: fence.start()].rstrip("\n").rsplit("\n", 1)[-1].strip()
        marker = _MARKER.match(above)
        if above.startswith("<!-- doc-test") and marker is None:
            raise ValueError(f"{page.name}:{line - 1}: unreadable doc-test marker {above!r}")
        needs: tuple[str, ...] = ()
        if marker is not None:
            needs = tuple(n.strip() for n in marker["names"].split(",") if n.strip())
            unknown = [n for n in needs if n not in REQUIREMENTS]
            if unknown or (marker["kind"] == "needs") != bool(needs):
                raise ValueError(f"{page.name}:{line - 1}: doc-test marker {above!r}: known needs {list(REQUIREMENTS)}")
        language = fence["info"].strip().split(" ")[0].lower()
        blocks.append(
            Block(page, line, language, fence["body"], needs, marker is not None and marker["kind"] == "skip",
                  "" if marker is None else marker["reason"] or "")
        )
    return blocks


def _skip_reason(block: Block) -> str | None:
    """Why ``block`` does not run here, or None if it does."""
    if block.skip:
        return f"{block.name}: not run ({block.reason or 'marked skip'})"
    missing = [REQUIREMENTS[n] for n in block.needs if _absent(n)]
    if missing:
        return f"{block.name}: needs {'; '.join(missing)}" + (f" ({block.reason})" if block.reason else "")
    return None


ALL_BLOCKS = [b for page in PAGES for b in _blocks(page) if b.language in PYTHON + SHELL]
SHELL_BLOCKS = [b for b in ALL_BLOCKS if b.language in SHELL]
PYTHON_PAGES = sorted({b.page for b in ALL_BLOCKS if b.language in PYTHON})
LEFT_OUT = [b for b in ALL_BLOCKS if b.language in PYTHON and (b.skip or b.needs)]


def _prepare(folder: Path) -> dict[str, str]:
    """Write the files the examples assume into ``folder``; return the environment to run them in."""
    import polars as pl

    from opendp_wgm.datasets import synthetic_zipf

    events = synthetic_zipf(2_000, 10, seed=0)
    events.write_csv(folder / "events.csv")
    events.write_parquet(folder / "events.parquet")
    (folder / "events").mkdir()
    events.write_parquet(folder / "events" / "part-0.parquet")
    with sqlite3.connect(folder / "events.db") as connection:
        connection.execute("create table events (user integer, item integer)")
        connection.executemany("insert into events values (?, ?)", events.select(pl.all().cast(pl.Int64)).rows())
    connection.close()
    (folder / "benchmarks").symlink_to(ROOT / "benchmarks")
    shutil.copytree(ROOT / "tutorials", folder / "tutorials")  # copied: an example may rewrite a notebook
    bin_dir = folder / ".bin"  # opendp-wgm and python: this interpreter, this checkout
    bin_dir.mkdir()
    for name, command in {"opendp-wgm": f'"{sys.executable}" -m opendp_wgm.cli', "python": f'"{sys.executable}"'}.items():
        shim = bin_dir / name
        shim.write_text(f'#!/bin/sh\nexec {command} "$@"\n', encoding="utf-8")
        shim.chmod(0o755)
    pythonpath = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "PYTHONPATH": pythonpath,
            "MPLBACKEND": "Agg"}


def _run(argv: list[str], folder: Path, env: dict[str, str], what: str) -> None:
    result = subprocess.run(
        argv, cwd=folder, env=env, capture_output=True, text=True, timeout=BLOCK_TIMEOUT, check=False
    )
    assert result.returncode == 0, f"{what} failed (status {result.returncode}):\n{result.stdout}\n{result.stderr}"


@pytest.mark.slow
@pytest.mark.parametrize("page", PYTHON_PAGES, ids=[str(p.relative_to(ROOT)) for p in PYTHON_PAGES])
def test_python_blocks_run(page: Path, tmp_path: Path) -> None:
    """A page's ```python blocks run in order in one fresh interpreter (those marked and not runnable here left
    out: each is reported by :func:`test_left_out_python_block`)."""
    blocks = [b for b in _blocks(page) if b.language in PYTHON and _skip_reason(b) is None]
    if not blocks:
        pytest.skip(f"{page.relative_to(ROOT)}: every ```python block needs what is not here")
    script = "".join(f"# --- {b.name} ---\n{b.body}\n" for b in blocks)
    (tmp_path / "doc_blocks.py").write_text(script, encoding="utf-8")
    _run([sys.executable, "doc_blocks.py"], tmp_path, _prepare(tmp_path), f"the ```python blocks of {page.name}")


@pytest.mark.parametrize("block", LEFT_OUT, ids=[b.name for b in LEFT_OUT])
def test_left_out_python_block(block: Block) -> None:
    """A marked ```python block: skipped with its reason here, or run with its page where it can."""
    reason = _skip_reason(block)
    if reason is not None:
        pytest.skip(reason)


@pytest.mark.slow
@pytest.mark.parametrize("block", SHELL_BLOCKS, ids=[b.name for b in SHELL_BLOCKS])
def test_shell_block_runs(block: Block, tmp_path: Path) -> None:
    reason = _skip_reason(block)
    if reason is not None:
        pytest.skip(reason)
    body = block.body
    if block.language == "console":  # the commands of a transcript, without their prompt
        body = "".join(line[2:] + "\n" for line in body.splitlines() if line.startswith("$ "))
    if "data" in block.needs:
        body = body.replace("../shared/data", str(_data_dir()))
    _run(["bash", "-e", "-o", "pipefail", "-c", body], tmp_path, _prepare(tmp_path), block.name)


def test_quick_starts_are_examples() -> None:
    """README.md and docs/index.md open with the quick start, and it is one of the blocks run above."""
    for page in (ROOT / "README.md", DOCS / "index.md"):
        first = next(b for b in _blocks(page) if b.language in PYTHON)
        assert "make_wgm_from_budget" in first.body and "calibrate_wgm" in first.body, f"{page.name}: no quick start"
        assert _skip_reason(first) is None


def test_block_extraction_and_markers() -> None:
    text = (
        "intro\n```python\na = 1\n```\n\n```text\nnot run\n```\n"
        '<!-- doc-test: needs spark, data "a cluster" -->\n```bash\nls\n```\n'
        "<!-- doc-test: skip -->\n```python\nb = a +\n```\n"
    )
    blocks = _blocks(ROOT / "README.md", text)
    assert [(b.line, b.language, b.body) for b in blocks] == [
        (2, "python", "a = 1\n"), (6, "text", "not run\n"), (10, "bash", "ls\n"), (14, "python", "b = a +\n")
    ]
    assert blocks[2].needs == ("spark", "data") and blocks[2].reason == "a cluster" and not blocks[2].skip
    assert blocks[3].skip and blocks[3].needs == ()
    assert "needs a server this test does not start" in (_skip_reason(Block(ROOT, 1, "sh", "", ("server",))) or "")
    with pytest.raises(ValueError, match="known needs"):
        _blocks(ROOT / "README.md", '<!-- doc-test: needs sparkk -->\n```bash\nls\n```\n')
    with pytest.raises(ValueError, match="unreadable"):
        _blocks(ROOT / "README.md", "<!-- doc-test needs spark -->\n```bash\nls\n```\n")


def test_every_marker_is_on_a_fence() -> None:
    """A doc-test marker is the line just above a fence of a block that is run (else it would mark nothing)."""
    for page in PAGES:
        lines = page.read_text(encoding="utf-8").splitlines()
        for number, line in enumerate(lines, start=1):
            if line.startswith("<!-- doc-test"):
                fence = lines[number] if number < len(lines) else ""
                language = fence[3:].strip().split(" ")[0].lower()
                assert fence.startswith("```") and language in PYTHON + SHELL, f"{page.name}:{number}: {line!r}"
