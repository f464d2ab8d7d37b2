"""MkDocs hook: the API page names every public name of ``opendp_wgm``.

``docs/api.md`` is written by hand. A name of ``opendp_wgm.__all__`` that none of its headings names (in
backquotes) is added at the page's end when the site is built, rendered from its signature and numpy-style
docstring. So a new constructor is in the reference as soon as it is exported, documented by its own docstring
(``docs/architecture.md``, "How to add a mechanism"), and the reference cannot lack a public name.
"""

from __future__ import annotations

import contextlib
import inspect
import re
from typing import Any

#: The page the hook completes (its path under ``docs/``).
PAGE = "api.md"
#: numpy-style sections whose entries are "name : type" lines, each followed by its indented description.
_ENTRY_SECTIONS = {"Parameters", "Other Parameters", "Returns", "Yields", "Raises", "Warns", "Attributes"}
_UNDERLINE = re.compile(r"^-{3,}\s*$")
_ROLE = re.compile(r":(?:func|class|mod|meth|attr|data|obj|exc|math):`~?([^`]+)`")


def documented(markdown: str) -> set[str]:
    """The names a heading of ``markdown`` holds in backquotes (``opendp_wgm.x.y`` counts as ``y``)."""
    names: set[str] = set()
    for line in markdown.splitlines():
        if line.startswith("#"):
            names.update(name.rsplit(".", 1)[-1] for name in re.findall(r"`([\w.]+)`", line))
    return names


def undocumented(markdown: str) -> list[str]:
    """The public names of ``opendp_wgm`` that no heading of ``markdown`` names, in ``__all__``'s order."""
    import opendp_wgm

    names = documented(markdown)
    return [name for name in opendp_wgm.__all__ if name not in names]


def _inline(text: str) -> str:
    """RST roles as Markdown code: ``:func:`x``` and ``:math:`x``` become ```x```."""
    return _ROLE.sub(lambda match: f"`{match[1]}`", text)


def _sections(doc: str) -> list[tuple[str, list[str]]]:
    """``(title, lines)`` of each numpy-style section; the text before the first is titled ``""``."""
    lines = inspect.cleandoc(doc).splitlines()
    sections: list[tuple[str, list[str]]] = [("", [])]
    index = 0
    while index < len(lines):
        if index + 1 < len(lines) and lines[index].strip() and _UNDERLINE.match(lines[index + 1]):
            sections.append((lines[index].strip(), []))
            index += 2
            continue
        sections[-1][1].append(lines[index])
        index += 1
    return sections


def _prose(lines: list[str]) -> list[str]:
    """Free text: paragraphs kept; ``.. math::`` (its text on the line, or its indented block) and ``>>>`` lines
    (with their output, to the next blank line) fenced as code."""
    out: list[str] = []
    block: str | None = None  # the open fence: "pycon" (an example) or "math" (a ``.. math::`` block)
    for line in lines:
        ends_example = block == "pycon" and not line.strip()
        ends_math = block == "math" and line.strip() and not line[0].isspace()
        if ends_example or ends_math:
            out += ["```", ""]
            block = None
        math = re.match(r"\s*\.\. math::\s*(.*)$", line)
        if block is not None:
            if line.strip():
                out.append(line.strip())
        elif math and math[1]:
            out += ["", "```text", math[1], "```", ""]
        elif math:
            out += ["", "```text"]
            block = "math"
        elif line.lstrip().startswith(">>>"):
            out += ["", "```pycon", line.strip()]
            block = "pycon"
        else:
            out.append(_inline(line))
    if block is not None:
        out.append("```")
    return out


def _entries(lines: list[str]) -> list[str]:
    """A section of "name : type" entries as a Markdown definition list."""
    out: list[str] = []
    first = True  # the next description line starts a definition
    for line in lines:
        if not line.strip():
            continue
        if not line[0].isspace():
            name, _, kind = line.partition(" : ")
            out += ["", f"`{name.strip()}`" + (f" ({_inline(kind.strip())})" if kind else "")]
            first = True
        else:
            out.append((":   " if first else "    ") + _inline(line.strip()))
            first = False
    return out


class _Annotation(str):
    """An annotation kept as text (``from __future__ import annotations``), shown without quotes."""

    def __repr__(self) -> str:
        return str(self)


def _signature(value: Any) -> inspect.Signature:
    """``value``'s signature with its (string) annotations shown as written."""

    def shown(annotation: Any) -> Any:
        return _Annotation(annotation) if isinstance(annotation, str) else annotation

    signature = inspect.signature(value)
    parameters = [p.replace(annotation=shown(p.annotation)) for p in signature.parameters.values()]
    return signature.replace(parameters=parameters, return_annotation=shown(signature.return_annotation))


def render(name: str, value: Any) -> str:
    """One public name's entry: its heading, its signature (a callable's) and its docstring as Markdown."""
    out = [f"### `{name}`", ""]
    with contextlib.suppress(TypeError, ValueError):  # not a callable, or one without a signature
        out += ["```python", f"{name}{_signature(value)}", "```", ""]
    for title, lines in _sections(inspect.getdoc(value) or "(no docstring)"):
        if title:
            out += ["", f"**{title}**", ""]
        out += _entries(lines) if title in _ENTRY_SECTIONS else _prose(lines)
    return "\n".join(out).strip() + "\n"


def completed(markdown: str) -> str:
    """``markdown`` with a section for the public names none of its headings names (unchanged if there are none)."""
    missing = undocumented(markdown)
    if not missing:
        return markdown
    import opendp_wgm

    intro = (
        "## Other public names\n\nThe public names that no section above describes, rendered from their "
        "signatures and docstrings when this site is built.\n"
    )
    entries = "\n".join(render(name, getattr(opendp_wgm, name)) for name in missing)
    return f"{markdown.rstrip()}\n\n{intro}\n{entries}"


def on_page_markdown(markdown: str, page: Any, **_: Any) -> str:
    """MkDocs' page hook: complete the API page; leave every other page as it is."""
    return completed(markdown) if page.file.src_uri == PAGE else markdown
