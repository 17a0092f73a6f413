"""`sparring sandbox`: run commands in a fresh sandbox; benchmark the lifecycle."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import typer

from sparring.cli.common import JSON_OPT, emit_json, err_console, fail, guarded, run_async
from sparring.errors import ConfigError

if TYPE_CHECKING:
    from sparring.sandbox.base import SandboxSpec

app = typer.Typer(help="Sandboxes: isolated, quota-bound, copy-on-write environments.", no_args_is_help=True)


_FLAGS = {
    "memory_mb": "--memory-mb",
    "pids": "--pids",
    "cpus": "--cpus",
    "disk_mb": "--disk-mb",
    "nofile": "--nofile",
}


def _spec(**kw: object) -> SandboxSpec:
    """A SandboxSpec, or a one-line ConfigError naming the flag that is out of range."""
    from pydantic import ValidationError

    from sparring.sandbox.base import SandboxSpec

    try:
        return SandboxSpec(**kw)
    except ValidationError as e:
        err = e.errors()[0]
        field = str(err["loc"][0]) if err["loc"] else "?"
        if field == "workspace_alias":  # its validator's own one-line reason
            raise ConfigError(f"--workspace-at: {(err.get('ctx') or {}).get('error', err['msg'])}") from None
        raise ConfigError(
            f"{_FLAGS.get(field, field)} {kw.get(field)!r} is out of range: {err['msg'].lower()}"
        ) from None


@app.command("exec", context_settings={"allow_interspersed_args": False})
@guarded
def exec_cmd(
    cmd: list[str] = typer.Argument(..., help="Command and arguments (after --)."),
    workspace: Path | None = typer.Option(
        None, "--workspace", help="Directory seen at /workspace (never modified)."
    ),
    network: str = typer.Option("none", "--network", help="none | loopback | allowlist"),
    allow: list[str] = typer.Option(
        [], "--allow", help="With --network allowlist: a host or host:port to reach."
    ),
    memory_mb: int | None = typer.Option(None, "--memory-mb", help="Memory limit in MiB."),
    pids: int | None = typer.Option(None, "--pids", help="Most processes at once."),
    cpus: float | None = typer.Option(
        None, "--cpus", help="CPU bound in cores (cgroup quota; 0.5: half a core)."
    ),
    disk_mb: int = typer.Option(512, "--disk-mb", help="Most MiB the command may write."),
    nofile: int = typer.Option(1024, "--nofile", help="Most open files per process."),
    timeout: float = typer.Option(
        30.0, "--timeout", help="Seconds before the whole process tree is killed (exit 124)."
    ),
    image: str | None = typer.Option(
        None, "--image", help="Run on this image's root (pulled, imported or built: see `sparring image`)."
    ),
    workspace_at: str | None = typer.Option(
        None,
        "--workspace-at",
        help="Show the workspace at this path too (where the image keeps it: /testbed).",
    ),
    json_out: bool = JSON_OPT,
) -> None:
    """Run CMD in a fresh sandbox whose /workspace is a copy-on-write view of --workspace (and whose /
    is --image's root, in its WorkingDir when no --workspace is given)."""
    from sparring.sandbox.local.backend import LocalBackend

    if network not in ("none", "loopback", "allowlist"):
        raise ConfigError(f"--network must be 'none', 'loopback' or 'allowlist', not {network!r}")
    if allow and network != "allowlist":
        raise ConfigError("--allow needs --network allowlist")
    if workspace is not None and not workspace.is_dir():
        raise ConfigError(f"--workspace {workspace} is not a directory")
    if timeout <= 0:
        raise ConfigError("--timeout must be positive")
    net: Literal["none", "loopback", "allowlist"] = network  # type: ignore[assignment]
    spec = _spec(
        workspace=workspace.resolve() if workspace else None, network=net, allow_hosts=tuple(allow),
        memory_mb=memory_mb, pids=pids, cpus=cpus, disk_mb=disk_mb, nofile=nofile, image=image,
        workspace_alias=workspace_at,
    )  # fmt: skip

    async def go():
        backend = LocalBackend()
        sb = await backend.create(spec)
        cwd = "/workspace"
        if sb.image is not None and workspace is None and sb.image.working_dir:
            cwd = sb.image.working_dir
        try:
            return await sb.exec(list(cmd), timeout=timeout, cwd=cwd), sb.degraded
        finally:
            await sb.close()

    r, degraded = run_async(go())
    not_found = r.exit_code == 127 and r.stderr.startswith("sparring: command not found")
    if json_out:
        emit_json({**r.to_json(), **({"degraded": list(degraded)} if degraded else {})})
    else:
        for d in degraded:
            err_console.print(f"[yellow]limit degraded (no writable cgroups): {d}[/]")
        sys.stdout.write(r.stdout)
        if not not_found:
            sys.stderr.write(r.stderr)
        if r.timed_out:
            err_console.print(f"[yellow]timed out after {timeout:g}s[/]")
        if r.oom_killed:
            err_console.print("[yellow]killed: out of memory[/]")
    if not_found:
        raise fail(
            f"command not found in the sandbox: {cmd[0]} "
            + (f"(is it in image {image}?)" if image else "(is it installed on the host /usr or the venv?)"),
            127,
        )
    raise typer.Exit(r.exit_code)


@app.command("tune")
@guarded
def tune(
    apply: bool = typer.Option(False, "--apply", help="Set cgroup favordynmods (root; until reboot)."),
    json_out: bool = JSON_OPT,
) -> None:
    """Show (or --apply) the host setting that keeps sandbox create fast on a quiet host."""
    import os

    from sparring.sandbox.isolation import tuning

    if apply:
        if os.geteuid() != 0:
            raise fail("sandbox tune --apply needs root: run it with sudo, or leave the host as it is", 2)
        tuning.apply()
    st = tuning.state()
    if json_out:
        emit_json(st)
    elif not st["supported"]:
        err_console.print("no cgroup v2 mount: favordynmods cannot be set on this host")
    else:
        on = (
            "on"
            if st[tuning.OPTION]
            else "off (sandbox create waits ~10 ms on an idle host; --apply sets it)"
        )
        err_console.print(f"cgroup favordynmods on {st['cgroup2_mount']}: {on}")


@app.command("bench")
@guarded
def bench(
    n: int = typer.Option(20, "--n", min=1, help="Sandboxes to cycle through."),
    concurrency: int | None = typer.Option(
        None,
        "--concurrency",
        min=1,
        help="Sandboxes cycled at once (default: the CPU count, at most 4; more than the CPUs and every "
        "operation's time includes waiting for a core).",
    ),
    files: int = typer.Option(1000, "--files", min=0, help="Files in the benchmark workspace."),
    changed: int = typer.Option(10, "--changed", min=0, help="Files changed before each snapshot."),
    execs: int = typer.Option(20, "--execs", min=1, help="Exec round trips per sandbox."),
    alive: int = typer.Option(0, "--alive", min=0, help="Also hold this many sandboxes alive at once."),
    podman: bool = typer.Option(
        False, "--podman", help="Measure the same cycle through podman, print the ratio."
    ),
    limits: bool = typer.Option(
        True, "--limits/--no-limits", help="Memory/pids cgroups on the cycled sandboxes."
    ),
    prefork: int = typer.Option(
        2, "--prefork", min=0, max=64, help="Pre-started sandboxes per shape (0: the cold path only)."
    ),
    image: str | None = typer.Option(
        None, "--image", help="Every sandbox on this image's root (with --podman, podman runs it too)."
    ),
    json_out: bool = JSON_OPT,
) -> None:
    """Benchmark create / exec / snapshot / restore / reset / close and warm acquire (medians, ms);
    creates from a pre-fork pool, with the cold path measured in the same run (cold_*)."""
    from sparring.sandbox.bench import OPS, run_bench

    if concurrency is None:
        concurrency = min(4, os.cpu_count() or 1)
    with err_console.status(f"benchmarking {n} sandboxes, {concurrency} at a time"):
        res = run_async(
            run_bench(n, concurrency, files, changed, execs, alive, podman, limits, prefork, image)
        )
    if json_out:
        emit_json(res)
    else:
        from rich.table import Table

        cold = "cold_create_ms" in res
        t = Table("metric", "median ms", "p99 ms", *(["cold median ms", "cold p99 ms"] if cold else []))
        for k in OPS:
            row = [f"{res[k + '_ms']:.2f}", f"{res[k + '_p99_ms']:.2f}"]
            if cold and f"cold_{k}_ms" in res:
                row += [f"{res[f'cold_{k}_ms']:.2f}", f"{res[f'cold_{k}_p99_ms']:.2f}"]
            t.add_row(k, *row)
        err_console.print(t)
        err_console.print(f"max concurrent: {res['max_concurrent']}  mode: {res['mode']}")
        if not res.get("cgroup_favordynmods"):
            err_console.print("note: cgroup favordynmods is off; see `sparring sandbox tune`")
        if "podman_ratio" in res:
            err_console.print(
                f"podman cycle: {res['podman_cycle_ms']} ms, {res['podman_ratio']}x the local one"
            )
