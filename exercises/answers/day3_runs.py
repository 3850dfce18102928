"""The per-seed tables of day 3's answers, from the committed runs of day 3's command.

    python -m exercises.answers.day3_runs      # from the project's root; every lab/results/course/train-*-s*

Each row is one run: its precision and seed, then layer 1's and layer 2's measures at step 0 and at
the run's last logged step (steps.jsonl), and the final test accuracy (metrics.jsonl's last line).
`distance` changes are the unrounded end minus the unrounded start, rounded once.
"""
import json
from pathlib import Path

import measures
from lab.experiments import with_defaults
from model import model_from_config

RUNS = Path(__file__).resolve().parents[2] / "lab/results/course"


def rows(run: Path) -> dict:
    cfg = with_defaults(json.loads((run / "config.json").read_text()))
    steps = [json.loads(line) for line in (run / "steps.jsonl").read_text().splitlines()]
    first, last = steps[0], steps[-1]
    model = model_from_config(cfg)
    out = {"run": run.name, "precision": cfg["precision"], "seed": cfg["seed"], "step": last["step"],
           "test_acc": json.loads((run / "metrics.jsonl").read_text().splitlines()[-1])["test_acc"]}
    for i, layer in enumerate(model.attention_layers[:2]):
        start, end = first["heads"][i], last["heads"][i]
        origin = measures.origins(layer, start, end)
        around = measures.around_query(measures.layer_at(layer, end))
        out[i + 1] = dict(heads=around["one_pixel_heads"], pixels=around["one_pixel"], ring=around["ring"],
                          held=origin["already_nearest"],
                          fresh=measures.fresh_start_held(origin["pixels"], layer.heads, cfg["center_std"]),
                          distance=last["layers"][i]["distance"] - first["layers"][i]["distance"],
                          travel=origin["travel_mean"], alpha=origin["alpha"], wide=origin["wide"])
    return out


def table(header: str, found: list, cells) -> str:
    """A Markdown table: the header's columns after `run`, then a row a run of `cells(run, layer 1, layer 2)`."""
    lines = [f"| run | {header} |", "|---" * (header.count("|") + 2) + "|"]
    return "\n".join(lines + [f"| {r['run']} | {cells(r, r[1], r[2])} |" for r in found])


def main() -> None:
    order = lambda run: (not run.name.startswith("train-fp32"), int(run.name.rsplit("-s", 1)[1]))  # fp32 first
    found = [rows(run) for run in sorted(RUNS.glob("train-*-s*"), key=order)]
    print(table("L1 one-pixel heads | L1 pixels | on the 3x3 ring | held by the start | a fresh start's chance "
                "| L1 distance change, px | L2 distance change, px", found,
                lambda r, one, two: f"{one['heads']} | {one['pixels']} | {one['ring']} | {one['held']} | "
                                    f"{one['fresh']:.2f} | {one['distance']:+.2f} | {two['distance']:+.2f}"))
    print()
    print(table("L1 travel, px | L2 travel, px | L1 median alpha | L2 median alpha | L2 heads below alpha 0.2 "
                "| L2 one-pixel heads | test accuracy", found,
                lambda r, one, two: f"{one['travel']:.2f} | {two['travel']:.2f} | {one['alpha']:.2f} | "
                                    f"{two['alpha']:.2f} | {two['wide']} | {two['heads']} | {r['test_acc']:.4f}"))

if __name__ == "__main__":
    main()
