"""Write into a CPU kind's pack the timing context its A/B chose (foundation.domain.timing_context):
a box of the pack's fingerprint then times its candidates in it unless FARM_TIMING_CONTEXT says
otherwise (`farm fingerprint` shows which, and why).

The A/B is bench/cache_flush.py's: whole tunes in pairs, one side warm, the other the context tried,
each pair's ratio the tried side's library time over warm's. Every file given must be of the pack's
CPU and of one context; their pairs are pooled (several models make one choice). The context is chosen
where the pooled median is at most 0.95 and most pairs beat warm; else warm, written all the same, so
the pack says the question was asked and what the answer was.

The pack keeps one A/B per context tried (``timing_contexts_tried``; a new A/B of a context replaces
its earlier one), and times in the context that won with the lowest median, else warm: an A/B of a
second context that lost to warm leaves the first one's win standing.

    .venv/bin/python bench/pack_timing_context.py PACK AB.json [AB.json ...] [--dry-run]

Prints one JSON document: this A/B's choice (``this_ab``), the context the pack now times in, and every
A/B it holds.
Exit codes: 0 written (or, with --dry-run, chosen); 2 bad arguments, an A/B of another CPU or context,
or too few pairs; 3 no pack there, or a damaged one.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))



def pairs_of(paths: list[Path], cpu: str) -> tuple[str, list[float]]:
    """The context tried and every pair's ratio, from A/B files all of ``cpu``; BadInput otherwise."""
    from foundation.errors import BadInput

    tried, ratios = None, []
    for path in paths:
        try:
            ab = json.loads(path.read_text())
            context, by_pair, of = ab["context"], ab["context_over_warm_by_pair"], ab["cpu_model"]
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise BadInput(f"{path} is not a bench/cache_flush.py result ({type(err).__name__}: {err})",
                           "give the --json file that script wrote") from None
        if of != cpu:
            raise BadInput(f"{path} was measured on {of!r}, the pack on {cpu!r}",
                           "give the A/B of the pack's own CPU kind")
        if tried is not None and context != tried:
            raise BadInput(f"{path} tried {context!r}, an earlier file {tried!r}", "give the A/Bs of one context")
        tried = context
        ratios.extend(float(r) for r in by_pair)
    return tried, ratios


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("pack", type=Path)
    parser.add_argument("ab", type=Path, nargs="+", help="bench/cache_flush.py --json results of the pack's CPU")
    parser.add_argument("--dry-run", action="store_true", help="print the choice, write nothing")
    args = parser.parse_args(argv)

    from foundation.clock import utc_now
    from foundation.domain.timing_context import TimingContext, choose_hardware_timing
    from foundation.errors import BadInput, FarmError
    from foundation.registry.packs import header_about, read_pack, write_pack
    from foundation.registry.shipped_packs import TIMING_CONTEXT_KEY, TIMING_CONTEXTS_TRIED_KEY

    try:
        store, header = read_pack(args.pack)
    except FarmError as err:
        print(f"error: {err}", file=sys.stderr)
        return 3
    try:
        try:
            tried, ratios = pairs_of(args.ab, header.get("cpu", ""))
            chosen = choose_hardware_timing(TimingContext(tried), ratios, [p.name for p in args.ab])
        except (BadInput, ValueError) as err:
            print(f"error: {err}", file=sys.stderr)
            return 2
        entry: dict[str, Any] = {**chosen.to_json(), "command": " ".join(["python", *sys.argv]),
                                 "date": utc_now().isoformat()}
        trials, standing = with_this_ab(header, entry)
        if not args.dry_run:
            about = header_about(header)
            about[TIMING_CONTEXT_KEY], about[TIMING_CONTEXTS_TRIED_KEY] = standing, trials
            write_pack(store, args.pack, about)
    finally:
        store.dispose()
    print(json.dumps({"pack": args.pack.name, "fingerprint": header.get("fingerprint"), "cpu": header.get("cpu"),
                      "written": not args.dry_run, "this_ab": entry, TIMING_CONTEXT_KEY: standing,
                      TIMING_CONTEXTS_TRIED_KEY: trials}, indent=2))
    return 0


def with_this_ab(header: dict[str, Any], entry: dict[str, Any]) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The pack's A/Bs, one per context tried, with ``entry`` in place of its context's earlier one, and
    the one the pack times by (choose_among_trials). A pack written before A/Bs were kept holds only its
    choice's; entries this version cannot read are dropped."""
    from foundation.domain.timing_context import HardwareTiming, choose_among_trials
    from foundation.registry.shipped_packs import TIMING_CONTEXT_KEY, TIMING_CONTEXTS_TRIED_KEY

    held = header.get(TIMING_CONTEXTS_TRIED_KEY)
    if not isinstance(held, list):
        held = [header[TIMING_CONTEXT_KEY]] if TIMING_CONTEXT_KEY in header else []
    this = HardwareTiming.from_json(entry)
    read = [(e, t) for e in held if (t := HardwareTiming.from_json(e)) is not None and t.tried is not this.tried]
    read.append((entry, this))
    standing = choose_among_trials([t for _e, t in read])
    return [e for e, _t in read], next(e for e, t in read if t is standing)


if __name__ == "__main__":
    sys.exit(main())
