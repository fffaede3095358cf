"""MkDocs hook: the docstrings cross-reference in Sphinx's roles (:func:`load_benchmark`,
:class:`~xder_data.Benchmark`), which Markdown renders as the role's name beside the code. The API
reference shows the code alone, as Sphinx would (``~`` keeps the last dotted part)."""

from __future__ import annotations

import re
from typing import Any

_ROLE = re.compile(r":(?:py:)?(?:func|class|meth|mod|data|attr|exc|obj):<code>(~?)([^<]*)</code>")


def _code(match: re.Match[str]) -> str:
    name = match.group(2).rsplit(".", 1)[-1] if match.group(1) else match.group(2)
    return f"<code>{name}</code>"


def on_page_content(html: str, **kwargs: Any) -> str:
    return _ROLE.sub(_code, html)
