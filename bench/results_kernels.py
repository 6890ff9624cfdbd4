"""docs/benchmarks.md's account of the farm's kernels inside the model: what lies between them, each heavy
kernel's time in the model against alone, which cache state predicts the model, and the timing-context
A/Bs that followed from it (the end of the Peers chapter)."""

from __future__ import annotations

from result_readers import read_between, read_in_model
from results_format import Page, day, link, ms, table


def kernels_in_the_model(page: Page) -> list[str]:
    between = [read_between(page.raw(row["file"])) | {"row": row} for row in page.index.get("between_kernels", [])]
    lines = [
        "### What lies between the kernels",
        "",
        "    FARM_HOME=HOME .venv/bin/python bench/between_kernels.py MODEL --runs 30 \\",
        "        --out docs/results/between-MODEL-CPU.json",
        "",
        "The farm-tuned library with every call of its VM timed: the share of the model's time spent in layout",
        "transforms, padding copies, tasks built untuned and the VM's own calls, between its tuned kernels.",
        "",
    ]
    if between:
        lines += table(["case", "CPU", "form", "whole ms", "between", "of which", "measured", "raw"],
                        [[b["case"], page.cpu(b["row"]), b["form"], ms(b["whole_ms"]), f"{b['share']:.1%}",
                          ", ".join(f"{name} {share:.1%}" for name, share in b["parts"].items() if share >= 0.001),
                          day(b["date"]), link(b["row"]["file"])] for b in between])
    else:
        lines.append("No figure yet: it needs a quiet box.")
    lines += [
        "",
        "### The heavy kernels in the model against alone",
        "",
        "    .venv/bin/python bench/in_model_ratio.py MODEL --side farm=REGISTRY --runs 30 \\",
        "        --out docs/results/in-model-MODEL-CPU.json",
        "",
        "Each kernel over 5% of the model, timed inside the model (every VM call timed) against its time",
        "alone with warm caches: the loss a kernel takes from its neighbours, which tuning does not see.",
        "",
    ]
    in_model = [side | {"row": row} for row in page.index.get("in_model", [])
                for side in read_in_model(page.raw(row["file"]))]
    if in_model:
        lines += table(["case", "CPU", "side", "kernels", "within 1.15x", "in model / alone (by share)",
                         "worst", "measured", "raw"],
                        [[m["case"], page.cpu(m["row"]), m["side"], m["kernels"], m["within"],
                          f"{m['weighted_ratio']:.2f}x", f"{m['worst']:.2f}x", day(m["date"]),
                          link(m["row"]["file"])] for m in in_model])
    else:
        lines.append("No figure yet: it needs a quiet box.")
    lines += in_model_contexts(page)
    lines += [
        "",
        "- **Timing in the model's context, A/B on the Zen 4** (`bench/cache_flush.py resnet-18 --context auto",
        "  --pairs 3 --trials-per-task 32`): `auto`/`warm` 1.405, 1.190, 0.723, a spread that is the search's own;",
        "  its heavy kernels already run 1.04x their warm time in the model (8 of 9 within 1.15x). Pack: `warm`.",
        "- **The same A/B on the Xeon family 6 model 167**: 1.008, 1.052, 1.097 (none won; pair 1's `auto` made",
        "  four heavy convolutions faster, four slower). Pack: `warm`. resnet-18's heavy kernels at the hour (128",
        "  a task) run 1.01-1.14x their warm alone time in the model; resnet-50's at its hour 4 of 9 and 0 of 8",
        "  within 1.15x (worst 1.59-1.76x). One `auto` pair on resnet-50 read 1.27 (lost).",
        "- **Which cache state the model's kernels meet there** (the contexts table): `producer` and `flushed`",
        "  predict it (resnet-50 1.01x and 0.98x by share, 8 of 8 within 1.15x, against warm's 1.30x; resnet-18",
        "  0.99x and 1.03x): the weights and the output come from memory. `l2-evicted` (twice the L2 streamed",
        "  before each call, the weights left in the L3) reads as warm does: back-to-back calls already read",
        "  weights that outgrow the L2 from the L3, so an L2-only context changes nothing the search ranks.",
        "  `producer` tuned against warm (\"What the defaults rest on\"): resnet-18 0.833, 1.136, 0.960, resnet-50",
        "  1.074, 1.005, 1.064; two of six won, so the pack stays `warm` (and holds both A/Bs). Predicting the",
        "  kernels' time did not rank schedules better: the spread between pairs is the search's own.",
        "- **Zen 5**, five pairs: 0.865, 0.858, 0.692, 0.916, 1.019; `auto` ranked faster schedules without",
        "  bringing kernels closer to their alone time (pair 1 in the model: `warm` 1.07x by share, `auto` 1.14x).",
        "- **Zen 3**, three pairs: 0.859, 0.930, 0.851, chiefly a faster last-stage convolution (3.2 against",
        "  6.1 ms in the model); in the model `warm`'s kernels 7 of 7 within 1.15x, `auto`'s 5 of 7.",
        "- **Ice Lake Xeon**, three pairs: 0.932, 0.928, 1.215: `auto` by the rule, on weak evidence (pair 1's",
        "  `auto` kernels took 31.3 ms in the model against `warm`'s 26.1, timed one after the other).",
        "- **So the context is chosen per CPU kind**: a kind's shipped pack holds one A/B per context tried",
        "  (`bench/pack_timing_context.py`: a context wins with a median over three pairs or more at most 0.95 of",
        "  warm's and most pairs won; the lowest winner stands), and a box of that fingerprint times in it unless",
        "  `FARM_TIMING_CONTEXT` says otherwise: `auto` on the Zen 3, Zen 5 and Ice Lake Xeon, `warm` elsewhere (Zen",
        "  4: 0.997 over nine pairs). Records are filed and ranked within their task's context.",
        "- **bert on the Zen 4**: no gain at 32 a task (1.048, 0.902, 1.057); at the hour's cap a second warm",
        "  tune timed level with `auto`'s library (139.7 against 139.2 ms,",
        "  [raw](results/timing-context-auto-bert-hour-2-zen4-2026-12-04.json)). **Huge pages** (`bench/huge_pages.py",
        "  bert`): 0.939, inside the 4 KB processes' own spread ([raw](results/huge-pages-bert-zen4-2026-12-04.json)).",
    ]
    return lines


CONTEXT_COLUMNS = ["warm", "l2-evicted", "weights", "producer", "flushed"]


def in_model_contexts(page: Page) -> list[str]:
    """One table row per model: its library's kernels in the model against alone in each context."""
    by_case: dict[tuple[str, str], dict] = {}
    for row in page.index.get("in_model_contexts", []):
        for side in read_in_model(page.raw(row["file"]), alone="context"):
            case = by_case.setdefault((side["case"], page.cpu(row)), {"cells": {}, "files": [], "date": side["date"]})
            cell = f"{side['weighted_ratio']:.2f}x ({side['within']}/{side['kernels']})"
            case["cells"].setdefault(side["context"], cell)
            case["files"] += [row["file"]] if row["file"] not in case["files"] else []
    if not by_case:
        return []
    return ["", "One library's heavy kernels timed alone in each context (`--side-context NAME=CONTEXT`): in the",
            "model against alone in that context by share (kernels within 1.15x); 1.00x: it predicts the model.", "",
            *table(["case", "CPU", *CONTEXT_COLUMNS, "measured", "raw"],
                   [[name, cpu, *(c["cells"].get(o, "") for o in CONTEXT_COLUMNS), day(c["date"]),
                     " ".join(link(f) for f in c["files"])] for (name, cpu), c in by_case.items()])]
