"""Static trajectory pages: a searchable index and one page per trajectory.

Trajectory content is hostile: the candidate wrote the messages, tool arguments, tool
outputs and files. Every such string is HTML-escaped (:func:`~sparring.monitor.site.esc`)
and the index's filter script reads rows only through ``textContent`` and ``data-*``
attributes, never ``innerHTML``; each page's Content-Security-Policy lets only its own
nonce'd script run, a second wall behind the escaping.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from sparring.monitor.site import esc, kv, page
from sparring.trajectory import ToolStep, Trajectory

Decode = Callable[[int], str]  # token id -> its text, when the policy's tokenizer is at hand

FILTER_JS = """
(function () {
  var q = document.getElementById('q'), st = document.getElementById('status'),
      fl = document.getElementById('flag'), mr = document.getElementById('minr'),
      rows = Array.prototype.slice.call(document.querySelectorAll('#trajs tbody tr')),
      shown = document.getElementById('shown');
  function apply() {
    var text = q.value.toLowerCase(), s = st.value, f = fl.value, m = parseFloat(mr.value), n = 0;
    rows.forEach(function (r) {
      var ok = (!text || r.textContent.toLowerCase().indexOf(text) >= 0)
        && (!s || r.dataset.status === s)
        && (!f || (' ' + r.dataset.flags + ' ').indexOf(' ' + f + ' ') >= 0)
        && (isNaN(m) || (r.dataset.reward !== '' && parseFloat(r.dataset.reward) >= m));
      r.hidden = !ok; if (ok) n++;
    });
    shown.textContent = String(n);
  }
  // index.html?status=ok&q=... opens with those filters set (a link can name a filtered view)
  var params = new URLSearchParams(window.location.search);
  [['q', q], ['status', st], ['flag', fl], ['minr', mr]].forEach(function (p) {
    if (params.has(p[0])) { p[1].value = params.get(p[0]); }
  });
  [q, st, fl, mr].forEach(function (el) { el.addEventListener('input', apply); });
  apply();
  document.body.setAttribute('data-filter-ready', '1');  // tests see that the page's own script ran
})();
"""


def page_file(traj_id: str) -> str:
    """The page of trajectory ``traj_id``, relative to the site (ids are hex; anything else is made file-safe)."""
    return "t/" + "".join(c if c.isalnum() or c in "-_" else "_" for c in traj_id) + ".html"


def page_name(t: Trajectory) -> str:
    return page_file(t.id)


def _reward(x: float | None) -> str:
    return "" if x is None or not math.isfinite(x) else f"{x:.4f}"


def _status(s: str) -> str:
    return f"<span class='status-{'ok' if s == 'ok' else 'bad'}'>{esc(s)}</span>"


def _flags(flags: Sequence[str]) -> str:
    return "".join(f"<span class='flag'>{esc(f)}</span>" for f in flags) or "<span class='muted'>-</span>"


def write_index(trajs: Sequence[Trajectory], out: Path, title: str, back: str | None = None) -> Path:
    """``out/index.html``: every trajectory as a row, filtered client-side (no network)."""
    statuses = sorted({t.status for t in trajs})
    flags = sorted({f for t in trajs for f in t.flags})
    opts = lambda vs: "".join(f"<option value='{esc(v)}'>{esc(v)}</option>" for v in vs)  # noqa: E731
    rows = "".join(
        f"<tr data-status='{esc(t.status)}' data-flags='{esc(' '.join(t.flags))}' data-reward='{_reward(t.reward)}'>"
        f"<td><a href='{esc(page_name(t))}'>{esc(t.id[:12])}</a></td><td>{esc(t.task_id)}</td>"
        f"<td>{_status(t.status)}</td><td class='num'>{esc(_reward(t.reward) or '-')}</td><td>{_flags(t.flags)}</td>"
        f"<td>{esc(t.policy)}</td><td class='num'>{esc(t.policy_version)}</td><td>{esc(t.run_id)}</td></tr>"
        for t in trajs
    )  # fmt: skip
    body = (
        (f"<p><a href='{esc(back)}'>← report</a></p>" if back else "")
        + f"<h1>{esc(title)}</h1><p><span id='shown'>{len(trajs)}</span> of {len(trajs)} trajectories shown.</p>"
        "<div class='filters'><input type='search' id='q' placeholder='search task, policy, id, run…' aria-label='search'>"
        f"<select id='status' aria-label='status'><option value=''>any status</option>{opts(statuses)}</select>"
        f"<select id='flag' aria-label='flag'><option value=''>any flag</option>{opts(flags)}</select>"
        "<input type='search' id='minr' placeholder='min reward' aria-label='minimum reward' size='10'></div>"
        "<div class='scroll'><table id='trajs'><thead><tr><th>id</th><th>task</th><th>status</th>"
        "<th class='num'>reward</th><th>flags</th><th>policy</th><th class='num'>policy v</th><th>run</th></tr></thead>"
        f"<tbody>{rows}</tbody></table></div>"
    )
    out.mkdir(parents=True, exist_ok=True)
    index = out / "index.html"
    index.write_text(page(title, body, FILTER_JS))
    return index


def _content(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return "" if content is None else json.dumps(content)


def _step(s: ToolStep) -> str:
    meta = [f"exit {s.exit_code}" if s.exit_code is not None else "", f"{s.duration_ms:.0f} ms",
            "output truncated for the model" if s.observation_truncated else ""]  # fmt: skip
    err = f"<div class='status-bad'>error: {esc(s.error)}</div>" if s.error else ""
    return (f"<div class='msg tool step' data-tool-call='{esc(s.tool_call_id)}'><span class='role'>tool output · "
            f"{esc(s.name)}</span> <span class='muted'>{esc(', '.join(m for m in meta if m))}</span>{err}"
            f"<pre class='tool-output'>{esc(s.output)}</pre></div>")  # fmt: skip


def _conversation(t: Trajectory) -> str:
    """Messages in order; each tool call is followed by its step's full output."""
    steps = {s.tool_call_id: s for s in t.steps}
    shown: set[str] = set()
    parts: list[str] = []
    turn = 0
    for m in t.messages:
        role = str(m.get("role", "?"))
        text = _content(m.get("content"))
        if role == "tool" and str(m.get("tool_call_id", "")) in shown:
            continue  # its full output is already shown under the call
        head = role
        if role == "assistant":
            turn += 1
            head = f"assistant · turn {turn}"
        calls = ""
        if role == "assistant":
            for call in m.get("tool_calls") or ():
                fn = call.get("function", {}) if isinstance(call, dict) else {}
                cid = str(call.get("id", "")) if isinstance(call, dict) else ""
                calls += (f"<div class='call'><span class='role'>tool call</span> <code>{esc(fn.get('name', '?'))}</code>"
                          f"<pre class='tool-args'>{esc(fn.get('arguments', ''))}</pre></div>")  # fmt: skip
                if cid in steps:
                    shown.add(cid)
                    calls += _step(steps[cid])
        body = f"<pre>{esc(text)}</pre>" if text.strip() else ""
        parts.append(f"<div class='msg {esc(role)}'><span class='role'>{esc(head)}</span>{body}{calls}</div>")
    for s in t.steps:  # steps no message refers to (e.g. a call that failed before the model saw it)
        if s.tool_call_id not in shown:
            parts.append(f"<div class='call'><span class='role'>tool call</span> <code>{esc(s.name)}</code>"
                         f"<pre class='tool-args'>{esc(s.raw_arguments)}</pre></div>{_step(s)}")  # fmt: skip
    return "".join(parts) or "<p class='muted'>no messages stored</p>"


def _diff(t: Trajectory) -> str:
    files = dict(t.diff.get("files") or {})
    deleted = list(t.diff.get("deleted") or [])
    if not files and not deleted:
        return "<p class='muted' id='diff'>The workspace was not changed.</p>"
    parts = [f"<p id='diff'>{len(files)} file(s) written, {len(deleted)} deleted.</p>"]
    for path, body in sorted(files.items()):
        if isinstance(body, dict) and "text" in body:
            text = str(body["text"])
            parts.append(f"<details open class='diff-file'><summary class='diff-add'>+ {esc(path)} "
                         f"({len(text.splitlines())} lines)</summary><pre>{esc(text)}</pre></details>")  # fmt: skip
        else:
            parts.append(f"<div class='diff-file diff-add'>+ {esc(path)} (binary)</div>")
    parts += [f"<div class='diff-file diff-del'>− {esc(p)} (deleted)</div>" for p in deleted]
    return "".join(parts)


def _tests(t: Trajectory) -> str:
    c = t.tests
    rows = "".join(
        f"<tr><td>{esc(name)}</td><td class='status-bad'>failed</td></tr>" for name in t.failing_tests
    )
    if c.passed and not t.failing_tests:
        rows = f"<tr><td>all {c.passed} hidden test(s)</td><td class='status-ok'>passed</td></tr>"
    elif c.passed:
        rows += f"<tr><td>the other {c.passed} hidden test(s)</td><td class='status-ok'>passed</td></tr>"
    summary = f"<p>passed {c.passed} · failed {c.failed} · errors {c.errors} (judge {esc(t.judge_version or '-')})</p>"
    table = f"<table id='per-test'><tr><th>test</th><th>result</th></tr>{rows}</table>" if rows else ""
    return summary + (table or "<p class='muted'>The judge ran no test (see the status and flags).</p>")


def _components(t: Trajectory) -> str:
    comps = t.outcome_components
    if not comps:
        return "<p class='muted'>no reward components</p>"
    rows = "".join(
        f"<tr><td>{esc(k)}</td><td class='num'>{v:.4f}</td></tr>" for k, v in sorted(comps.items())
    )
    return f"<table id='components'><tr><th>component</th><th class='num'>value</th></tr>{rows}</table>"


def _process(t: Trajectory) -> str:
    """The process checks, apart from the outcome: each check, its value and whether it tripped."""
    comps = t.process_components
    if not comps:
        return "<p class='muted'>no process checks recorded (judged before they existed)</p>"
    flagged = set(t.process_flags)
    rows = "".join(
        f"<tr><td>{esc(k.removeprefix('process/'))}</td><td class='num'>{v:.2f}</td>"
        f"<td>{'<span class=flag>tripped</span>' if k in flagged else 'ok'}</td></tr>"
        for k, v in sorted(comps.items())
    )
    return (
        f"<table id='process'><tr><th>check</th><th class='num'>value</th><th>verdict</th></tr>{rows}</table>"
    )


def _link(t: Trajectory) -> str:
    return f"<a href='../{esc(page_name(t))}'>{esc(t.id[:12])}</a> (reward {esc(_reward(t.reward) or '-')})"


def _tree(t: Trajectory, parent: Trajectory | None, children: Sequence[Trajectory]) -> str:
    """The fork tree around ``t``: its parent (and the turn it was forked at) and its branches."""
    if t.parent_id is None and not children:
        return "<p class='muted'>a root with no branches</p>"
    parts = []
    if t.parent_id is not None:
        up = (
            _link(parent)
            if parent is not None
            else esc(t.parent_id[:12]) + " <span class='muted'>(not shown)</span>"
        )
        parts.append(f"<p id='parent'>forked from {up} after turn {esc(t.branch_turn)}</p>")
    if children:
        items = "".join(f"<li>turn {esc(c.branch_turn)}: {_link(c)}</li>" for c in children)
        parts.append(
            f"<p>{len(children)} branch(es) forked from this trajectory:</p><ul id='children'>{items}</ul>"
        )
    return "".join(parts)


def _timings(t: Trajectory) -> str:
    if not t.timings:
        return "<p class='muted'>no timings stored</p>"
    rows = "".join(f"<tr><td>{esc(k)}</td><td class='num'>{v:.1f}</td></tr>" for k, v in sorted(t.timings.items())
                   if isinstance(v, int | float))  # fmt: skip
    return f"<table id='timings'><tr><th>stage</th><th class='num'>ms</th></tr>{rows}</table>"


def _trace(t: Trajectory, decode: Decode | None) -> str:
    """Sampled tokens with their logprobs, one block per assistant turn; redder = less likely."""
    if not t.traces:
        return "<p class='muted'>no token trace stored (a scripted or API policy)</p>"
    parts = []
    for i, tr in enumerate(t.traces, 1):
        ids = tr.completion_ids
        lps: list[float | None] = [*tr.logprobs] if tr.logprobs else [None] * len(ids)
        toks = []
        for tok, lp in zip(ids, lps, strict=False):
            p = math.exp(lp) if lp is not None else None
            shade = "" if p is None else f" style='background: hsl({int(120 * p)}, 70%, 85%)'"
            label = decode(tok) if decode else str(tok)
            tip = f"id {tok}" + ("" if lp is None else f", logprob {lp:.3f}, p {p:.3f}")
            toks.append(f"<span class='tok'{shade} title='{esc(tip)}'>{esc(label)}</span>")
        parts.append(f"<details class='trace'><summary>turn {i}: {len(ids)} sampled tokens "
                     f"(prompt {len(tr.prompt_ids)})</summary><div>{''.join(toks)}</div></details>")  # fmt: skip
    return "".join(parts)


def write_page(
    t: Trajectory, out: Path, decode: Decode | None = None, parent: Trajectory | None = None,
    children: Sequence[Trajectory] = (),
) -> Path:  # fmt: skip
    """``out/t/ID.html``: one trajectory, everything the store holds about it (with its fork tree:
    ``parent`` and ``children`` are linked when given)."""
    head = kv([
        ("task", esc(f"{t.task_id} v{t.task_version} · family {t.family or '-'} · tier {t.difficulty}")),
        ("policy", esc(f"{t.policy} v{t.policy_version}")),
        ("status", _status(t.status) + (f" <span class='status-bad'>{esc(t.error)}</span>" if t.error else "")),
        ("reward", esc(_reward(t.reward) or "unjudged")), ("outcome flags", _flags(t.outcome_flags)),
        ("process flags", _flags(t.process_flags)),
        ("attempts", esc(t.attempts) + "".join(f"<div class='muted'>retry: {esc(x)}</div>" for x in t.infra_errors)),
        ("run / group", esc(f"{t.run_id or '-'} · {t.group_id or '-'} #{t.sample_index}")),
        ("submitted", esc(t.submitted)), ("created", esc(time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t.created_at)))),
    ])  # fmt: skip
    body = (
        "<p><a href='../index.html'>← all trajectories</a></p>"
        f"<h1>Trajectory {esc(t.id)}</h1>{head}"
        f"<h2>Conversation</h2><div id='conversation'>{_conversation(t)}</div>"
        f"<h2>Workspace diff</h2>{_diff(t)}"
        f"<h2>Judge: per-test report</h2>{_tests(t)}"
        f"<h2>Outcome: reward components</h2>{_components(t)}"
        f"<h2>Process checks</h2>{_process(t)}"
        f"<h2>Fork tree</h2><div id='tree'>{_tree(t, parent, children)}</div>"
        f"<h2>Timings</h2>{_timings(t)}"
        f"<h2>Token trace</h2><div id='trace'>{_trace(t, decode)}</div>"
    )
    path = out / page_name(t)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page(f"trajectory {t.id}", body))
    return path


def write_site(
    trajs: Sequence[Trajectory], out: Path, title: str = "Trajectories", back: str | None = None,
    decode: Decode | None = None,
) -> dict[str, Any]:  # fmt: skip
    """The index and every page; returns the ``traj view --json`` object."""
    by_id = {t.id: t for t in trajs}
    kids: dict[str, list[Trajectory]] = {}
    for t in trajs:
        if t.parent_id is not None:
            kids.setdefault(t.parent_id, []).append(t)
    pages = [
        str(write_page(t, out, decode, by_id.get(t.parent_id or ""),
                       sorted(kids.get(t.id, []), key=lambda c: (c.branch_turn or 0, c.id))))
        for t in trajs
    ]  # fmt: skip
    index = write_index(trajs, out, title, back)
    return {"html": str(index), "pages": pages}
