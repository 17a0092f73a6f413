"""The static site's shared page frame: one inline stylesheet, escaping, small HTML helpers.

Every page is self-contained (inline CSS and JS, inline SVG): it opens from disk with no
server and fetches nothing. Everything that came from a run (task text, model output, tool
output, file names) goes through :func:`esc`; no page builds markup from candidate text.
"""

from __future__ import annotations

import html
import secrets
from typing import Any

from sparring.textsafe import inert

CSS = """
:root { --fg: #1b1f24; --muted: #57606a; --line: #d0d7de; --bg: #fff; --soft: #f6f8fa; --bad: #b42318; --ok: #067647; }
* { box-sizing: border-box; }
body { margin: 0; font: 15px/1.45 system-ui, -apple-system, "Segoe UI", Roboto, sans-serif; color: var(--fg); background: var(--bg); }
main { max-width: 1400px; margin: 0 auto; padding: 16px clamp(8px, 2vw, 24px) 48px; }
h1 { font-size: 1.5rem; margin: 0.2em 0 0.4em; overflow-wrap: anywhere; }
h2 { font-size: 1.15rem; margin: 1.4em 0 0.5em; }
a { color: #0b5cad; }
nav a { margin-right: 1em; }
.muted { color: var(--muted); }
.kv { display: grid; grid-template-columns: max-content 1fr; gap: 2px 14px; }
.kv dt { color: var(--muted); }
.kv dd { margin: 0; overflow-wrap: anywhere; }
.grid { display: grid; grid-template-columns: repeat(auto-fill, minmax(min(100%, 600px), 1fr)); gap: 18px; }
figure.chart { margin: 0; padding: 10px; border: 1px solid var(--line); border-radius: 8px; min-width: 0; }
figure.chart figcaption { font-weight: 600; margin-bottom: 6px; }
figure.chart svg { width: 100%; height: auto; display: block; }
figure.chart .narrow { display: none; }
@media (max-width: 640px) { figure.chart .wide { display: none; } figure.chart .narrow { display: block; } }
figure.chart .empty { color: var(--muted); padding: 2em 0; text-align: center; }
table { border-collapse: collapse; width: 100%; }
th, td { border-bottom: 1px solid var(--line); padding: 4px 8px; text-align: left; vertical-align: top; }
th { background: var(--soft); position: sticky; top: 0; }
td.num, th.num { text-align: right; font-variant-numeric: tabular-nums; }
.scroll { overflow-x: auto; }
pre { background: var(--soft); border: 1px solid var(--line); border-radius: 6px; padding: 8px; overflow-x: auto;
      white-space: pre-wrap; overflow-wrap: anywhere; font: 13px/1.4 ui-monospace, SFMono-Regular, Menlo, monospace; }
.msg { border-left: 4px solid var(--line); padding: 4px 10px; margin: 10px 0; }
.msg.assistant { border-color: #0072B2; }
.msg.tool { border-color: #E69F00; }
.msg.user, .msg.system { border-color: #009E73; }
.role { font-weight: 600; font-size: 0.9em; color: var(--muted); text-transform: uppercase; }
.flag { display: inline-block; background: #fee4e2; color: var(--bad); border-radius: 4px; padding: 0 6px; margin: 1px; font-size: 0.9em; }
.status-ok { color: var(--ok); } .status-bad { color: var(--bad); }
.tok { display: inline-block; border-radius: 3px; padding: 0 1px; margin: 1px 0; font: 12px ui-monospace, monospace; white-space: pre; }
input[type=search], select { font: inherit; padding: 4px 8px; border: 1px solid var(--line); border-radius: 6px; max-width: 100%; }
.filters { display: flex; flex-wrap: wrap; gap: 8px; margin: 8px 0 12px; }
.diff-add { color: var(--ok); } .diff-del { color: var(--bad); }
"""


def esc(x: Any) -> str:
    """HTML-escape any value (quotes too: the result is safe in text and in attribute values).

    Control characters are written out first (:func:`sparring.textsafe.inert`): a bidi override in a
    candidate's output would otherwise reorder the text the reviewer reads on the page."""
    return html.escape(inert("" if x is None else str(x)), quote=True)


def page(title: str, body: str, script: str = "") -> str:
    """A whole self-contained HTML document."""
    # A fresh nonce per page: only the page's own script may run, so even markup that slipped past
    # escaping could not execute (escaping is the guard; the policy is the second wall).
    nonce = secrets.token_urlsafe(16)
    js = f"<script nonce='{nonce}'>{script}</script>" if script else ""
    return (
        "<!doctype html>\n<html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        # No request may leave the page: not even a favicon lookup (the browser asks for /favicon.ico).
        "<link rel='icon' href='data:,'>"
        "<meta http-equiv='Content-Security-Policy' content=\"default-src 'none'; style-src 'unsafe-inline'; "
        f"script-src 'nonce-{nonce}'; img-src data:\">"
        f"<title>{esc(title)}</title><style>{CSS}</style></head>\n<body><main>\n{body}\n</main>{js}</body></html>\n"
    )


def kv(pairs: list[tuple[str, Any]]) -> str:
    return "<dl class='kv'>" + "".join(f"<dt>{esc(k)}</dt><dd>{v}</dd>" for k, v in pairs) + "</dl>"


def fmt(x: Any, digits: int = 3) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{x:.{digits}f}"
    return str(x)
