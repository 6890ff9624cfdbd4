"""`farm registry prune|pin|unpin`: what the registry keeps of its artifacts and jobs.

The rule is foundation.domain.retention's; the deleting, a batch a transaction,
foundation.registry.prune's. These commands need a registry to exist and create none.
"""

from __future__ import annotations

import sys

import typer

from farm.cli.command import FarmTyper
from farm.cli.options import JSON_OPTION, REGISTRY_OPTION, env_option
from farm.cli.output import emit_json, print_table, stdout_console
from farm.cli.units import age
from foundation.domain.retention import DEFAULT_KEEP
from foundation.registry.opening import open_store
from foundation.units import size

app = FarmTyper(rich_markup_mode=None)  # its commands join `farm registry` (farm.cli.registry)

ARTIFACT_ARGUMENT = typer.Argument(..., metavar="ARTIFACT", help="An artifact id (art-…), as `farm registry ls` lists.")
PRUNE_COLUMNS = ("artifact", "model", "batch", "target", "layout", "tvm", "size", "age", "why")


@app.command()
def prune(
    keep: int = env_option(DEFAULT_KEEP, "--keep", command="registry", metavar="N",
                           help="Artifacts kept per model, fingerprint, target and weights layout: the newest N "
                                "intact ones. Pinned ones, those an unfinished job uses and each scope's registry "
                                "hit stay whatever N is; invalidated (corrupt) ones go first."),
    older_than: int | None = env_option(None, "--older-than", command="registry", metavar="DAYS",
                                        help="Also delete jobs that finished more than DAYS days ago (0: every "
                                             "finished job), but for those that made an artifact that stays. "
                                             "Default: jobs are kept."),
    dry_run: bool = env_option(False, "--dry-run", command="registry",
                               help="List what would be deleted, with counts and bytes; delete nothing."),
    vacuum: bool = env_option(False, "--vacuum", command="registry",
                              help="Then run SQLite's VACUUM, which returns the freed space to the file system "
                                   "(PostgreSQL's autovacuum reclaims it without asking)."),
    registry: str | None = REGISTRY_OPTION,
    json_output: bool = JSON_OPTION,
) -> None:
    """Delete artifacts beyond the newest --keep of each scope and, with --older-than, old finished jobs.
    A batch a transaction: stopped at any point, the registry stays consistent and the next prune
    finishes."""
    from datetime import timedelta

    from foundation.clock import utc_now
    from foundation.domain.request_limits import check_number
    from foundation.domain.retention import KEEP, OLDER_THAN_DAYS

    check_number("--keep", keep, KEEP)
    check_number("--older-than", older_than, OLDER_THAN_DAYS)
    store = open_store(registry)
    finished_before = None if older_than is None else utc_now() - timedelta(days=older_than)
    plan = store.pruning.plan(keep, finished_before)
    models = {m.id: m for m in store.list_models()}

    def progress(what: str, done: int, of: int) -> None:
        if not json_output:
            print(f"deleting {what:<10} {done:,} of {of:,}", file=sys.stderr, flush=True)

    outcome = None if dry_run else store.pruning.apply(plan, progress)
    space = _space(store, plan.retention.bytes if outcome is None else outcome.artifact_bytes,
                   vacuum=vacuum and not dry_run)
    document = {
        "registry": str(store.url),
        "dry_run": dry_run,
        "keep": keep,
        "older_than_days": older_than,
        "finished_before": finished_before.isoformat() if finished_before else None,
        "planned": {"artifacts": len(plan.retention.deletions), "artifact_bytes": plan.retention.bytes,
                    "jobs": len(plan.job_ids)},
        "deleted": None if outcome is None else {
            "artifacts": outcome.artifacts, "artifact_bytes": outcome.artifact_bytes, "jobs": outcome.jobs,
            "jobs_unlinked": outcome.jobs_unlinked, "spared": outcome.spared},
        "kept": {reason.name.lower(): n for reason, n in plan.retention.kept.items()},
        "artifacts": [_deletion_json(d, models) for d in plan.retention.deletions],
        "jobs": plan.job_ids,
        "space": space,
    }
    if json_output:
        emit_json(document)
        return
    if dry_run:
        print_table(PRUNE_COLUMNS, [_deletion_row(d, models) for d in plan.retention.deletions],
                    empty="no artifact would be deleted")
    console = stdout_console()
    console.print(_summary(document))
    console.print(space["note"])


def _deletion_json(deletion, models: dict) -> dict:  # type: ignore[no-untyped-def]
    library, model = deletion.library, models.get(deletion.library.model_id)
    return {"id": library.id, "model": model.name if model else library.model_id,
            "batch": model.batch if model else None, "fingerprint": library.fingerprint_id,
            "target": library.target, "weights_layout": library.weights_layout, "tvm_version": library.tvm_version,
            "size": library.size, "created_at": library.created_at.isoformat(), "why": deletion.why.value}


def _deletion_row(deletion, models: dict) -> list:  # type: ignore[no-untyped-def]
    from foundation.registry.store import target_kind_of

    library, model = deletion.library, models.get(deletion.library.model_id)
    return [library.id, model.name if model else library.model_id, model.batch if model else None,
            target_kind_of(library.target), library.weights_layout, library.tvm_version, size(library.size),
            age(library.created_at), deletion.why.value]


def _summary(document: dict) -> str:
    planned, deleted, kept = document["planned"], document["deleted"], document["kept"]
    done = planned if deleted is None else deleted
    days = document["older_than_days"]
    jobs = "" if days is None else f" and {done['jobs']:,} finished jobs" + (f" older than {days} days" if days else "")
    verb = "would delete" if deleted is None else "deleted"
    line = f"{verb} {done['artifacts']:,} artifacts ({size(done['artifact_bytes'])}){jobs}"
    line += (f"; kept {sum(kept.values()):,} artifacts: {kept['newest']} among the newest {document['keep']} of "
             f"their scope, {kept['hit']} registry hits, {kept['pinned']} pinned, {kept['in_use']} in use by "
             f"unfinished jobs")
    if deleted is not None and any(deleted["spared"].values()):
        line += (f"; spared {deleted['spared']['artifacts']} artifacts and {deleted['spared']['jobs']} jobs "
                 "taken into use while it ran")
    return line


def _space(store, freed: int, *, vacuum: bool) -> dict:  # type: ignore[no-untyped-def]
    """Where the freed bytes go: on PostgreSQL autovacuum makes them reusable; SQLite keeps them
    inside its file until a VACUUM (``vacuum``: run it now) returns them to the file system."""
    if store.dialect != "sqlite":
        return {"reclaimed_by": "autovacuum",
                "note": "PostgreSQL's autovacuum reclaims the deleted rows' space for reuse; nothing to run"}
    if vacuum:
        before, after = store.pruning.vacuum_sqlite()
        return {"reclaimed_by": "vacuum", "file_bytes_before": before, "file_bytes_after": after,
                "note": f"VACUUM returned {size(max(0, before - after))} to the file system "
                        f"(the registry is now {size(after)})"}
    return {"reclaimed_by": None,
            "note": f"SQLite keeps the {size(freed)} freed inside the registry's file for its own reuse: "
                    "`farm registry prune --vacuum` (SQLite's VACUUM) returns it to the file system"}


@app.command()
def pin(
    artifact: str | None = typer.Argument(None, metavar="ARTIFACT",
                                          help="The artifact id (art-…) to pin; none: list the pinned ones."),
    registry: str | None = REGISTRY_OPTION,
    json_output: bool = JSON_OPTION,
) -> None:
    """Pin an artifact so that no `farm registry prune` deletes it (a library in production);
    without one, list the pinned artifacts."""
    store = open_store(registry)
    if artifact is None:
        pins = store.pins.list()
        if json_output:
            emit_json({"registry": str(store.url), "pins": [p.to_json() for p in pins]})
        else:
            print_table(("artifact", "pinned"), [[p.artifact_id, f"{age(p.pinned_at)} ago"] for p in pins],
                        empty="no pinned artifacts: `farm registry pin ARTIFACT` pins one")
        return
    _check_id(artifact)
    kept, new = store.pins.pin(artifact)
    if json_output:
        emit_json({**kept.to_json(), "new": new})
    else:
        stdout_console().print(f"pinned {artifact}: no prune deletes it" if new
                               else f"{artifact} was pinned already ({age(kept.pinned_at)} ago)")


@app.command()
def unpin(
    artifact: str = ARTIFACT_ARGUMENT,
    registry: str | None = REGISTRY_OPTION,
    json_output: bool = JSON_OPTION,
) -> None:
    """Unpin an artifact: a prune may delete it again once it is no longer among the newest of its scope."""
    _check_id(artifact)
    store = open_store(registry)
    was_pinned = store.pins.unpin(artifact)
    if json_output:
        emit_json({"artifact": artifact, "was_pinned": was_pinned})
    else:
        stdout_console().print(f"unpinned {artifact}" if was_pinned else f"{artifact} was not pinned")


def _check_id(artifact: str) -> None:
    from foundation.domain.request_limits import MAX_ID_LENGTH, check_text

    check_text("ARTIFACT", artifact, MAX_ID_LENGTH)
