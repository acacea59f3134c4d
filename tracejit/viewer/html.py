"""The viewer page: one self-contained HTML file (styles, dagre, the app and the program data
inline; a Content-Security-Policy forbids every network request)."""
from __future__ import annotations

import os
import re
from importlib import resources

from ..escape import script_json

_MARKER = re.compile(r"/\*(CSS|DAGRE|DATA|APP)\*/")


def _static(name: str) -> str:
    return resources.files(__package__).joinpath("static", name).read_text(encoding="utf-8")


def _script_safe(text: str) -> str:
    """Text that cannot end the <script> element it sits in."""
    return text.replace("</", "<\\/")


def render_html(document: dict) -> str:
    dagre = re.sub(r"//# sourceMappingURL=\S+", "", _static("dagre.min.js"))
    parts = {
        "CSS": _static("viewer.css"),
        "DAGRE": "/*! dagre (@dagrejs/dagre 3.1.3), MIT licence:\n" + _static("dagre.LICENSE").replace("*/", "* /")
                 + "*/\n" + _script_safe(dagre),
        "DATA": script_json(document),   # every string of the file: no '<', '>', '&' left raw
        "APP": _script_safe(_static("app.js")),
    }
    return _MARKER.sub(lambda m: parts[m.group(1)], _static("template.html"))


def write_html(document: dict, path) -> str:
    """Write the page for ``document`` to ``path``; returns the path."""
    path = os.fspath(path)
    with open(path, "w", encoding="utf-8") as f:
        f.write(render_html(document))
    return path
