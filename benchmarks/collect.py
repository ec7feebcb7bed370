"""Assemble docs/benchmarks.md from the tables each benchmark wrote to benchmarks/results/.

Every number there was measured by the command its section names; this script only copies.

    make bench-report
"""

from __future__ import annotations

from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
DOC = Path(__file__).resolve().parents[1] / "docs" / "benchmarks.md"
ORDER = ["fedavg", "overhead", "baselines", "superfed", "superfed_noise", "fedrod",
         "fedrod_new_clients", "pflmoe", "pflmoe_gpu", "export", "on_device", "server", "scale",
         "scale_cpu_profile", "scale_ray_profile", "scale_gpu", "client_overhead", "natural"]

HEADER = """# Benchmarks

Measured on this project's machine: 2 CPU cores (shared with other jobs while these ran), no
GPU, torch 2.14.1, one torch thread per benchmark, unless a section says otherwise (the GPU
sections name their GPU and torch). Each section
names the exact command; results are the LAST round, never the best; ratios are against a
baseline measured in the same run. Raw numbers: `benchmarks/results/*.json`; curves:
`benchmarks/results/*.png`. Regenerate this page with `make bench-report`.
"""


def main() -> None:
    parts = [HEADER]
    names = [n for n in ORDER if (RESULTS / f"{n}.md").is_file()]
    names += sorted(p.stem for p in RESULTS.glob("*.md") if p.stem not in ORDER)
    for name in names:
        text = (RESULTS / f"{name}.md").read_text().strip()
        # Each results file starts with its own "# title": demote it one level here.
        lines = [("#" + line if line.startswith("#") else line) for line in text.splitlines()]
        text = "\n".join(lines).replace("](", "](../benchmarks/results/")
        parts.append(text.replace("](../benchmarks/results/http", "](http"))
    DOC.write_text("\n\n".join(parts) + "\n")
    print(f"wrote {DOC} from {len(names)} result files")


if __name__ == "__main__":
    main()
