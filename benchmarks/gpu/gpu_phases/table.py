"""The GPU script's summary table (``table.txt``): every phase's outcome and figures."""

from __future__ import annotations

import json
from typing import Any

from gpu_phases.common import Script


def table(script: Script, benches: dict[Any, Any]) -> str:
    lines = ["phase        status  seconds"]
    for name, info in script.phases.items():
        lines.append(f"{name:12} {info['status']:7} {info.get('seconds', '')}")
    for name in ("tests", "step_graph", "pack", "full_run"):
        path = script.out / f"{name}.json"
        if not path.exists():
            continue
        payload = json.loads(path.read_text())
        if name == "tests":
            passed = sum(outcome == "passed" for outcome in payload["tests"].values())
            lines.append(f"gpu tests on {payload['device']}: {passed} of {len(payload['tests'])} passed")
        elif name == "step_graph":
            lines.append(
                f"step graphs: {payload['method']} {payload['benchmark']} epoch "
                f"{payload['eager_epoch_seconds']:.2f} s eager, {payload['replayed_epoch_seconds']:.2f} s "
                f"replayed; FAA {payload['faa']['eager']:.2f} / {payload['faa']['replayed']:.2f}, "
                f"identical: {payload['identical']}, agree: {payload['agree']}"
            )
        elif name == "pack":
            for r in payload["rows"]:
                if r["status"] in ("skipped", "error"):
                    lines.append(f"pack K={r['k']}: {r['status']} ({r['reason']})")
                    continue
                epoch = "-" if r["mean_epoch_seconds"] is None else f"{r['mean_epoch_seconds']:.2f}"
                speedup = r.get("speedup_over_one", float("nan"))
                lines.append(
                    f"pack K={r['k']} ({payload['mode']}): epoch {epoch} s a run, "
                    f"{r['epochs_per_hour'] or 0:.0f} epochs/h in all "
                    f"(x{speedup:.2f} one run's), wall {r['wall_seconds']:.0f} s"
                )
        else:
            p = payload
            projected = p["projected_full_protocol_seconds"]
            faa = "-" if p["faa"] is None else f"{p['faa']:.2f}"
            std = "" if p.get("faa_std") is None else f" +- {p['faa_std']:.2f}"
            lines.append(
                f"full run {p['method']} {p['benchmark']} m{p['buffer_size']} seeds {p['seeds']} "
                f"{p['epochs_per_task']}/{p['epochs']} epochs ({p['mode']}), "
                f"{p['tasks_done']}/{p['tasks']} tasks: "
                f"FAA {faa}{std} ({p['published_in']}: {p['published_faa'][0]}) "
                f"in {p['wall_seconds']:.0f} s; "
                f"the full protocol projected {'-' if projected is None else f'{projected / 60:.0f}'} min"
            )
    lines.append(
        "bench            mode      method  s/step  floor  ratio  syncs launches  peakMiB protocol_h replayed"
    )
    for (benchmark, mode), payload in benches.items():
        for r in payload["methods"]:
            peak = r.get("peak_memory_bytes")
            projected = r.get("projected_protocol_seconds")
            lines.append(
                f"{benchmark:16} {mode:9} {r['method']:6} {r['seconds_per_step'] * 1e3:6.1f}ms "
                f"{r['floor_seconds'] * 1e3:5.1f}ms {r['step_over_floor']:5.2f} "
                f"{r['host_syncs_per_step']:5d} {r.get('launches_per_step', '-'):>8} "
                f"{'-' if peak is None else f'{peak / 2**20:7.0f}'} "
                f"{'-' if projected is None else f'{projected / 3600:8.2f}'} "
                f"{r.get('replayed_steps') if r.get('replayed_steps') is not None else '-':>9}"
            )
    return "\n".join(lines)
