"""`farm registry forget`: remove tuning records of a fingerprint, chosen by id, workload or model,
or those that cannot be used (foundation.registry.record_removal; the replay check is
foundation.meta_schedule.database.record_replay's). It needs a registry to exist and creates none.
"""

from __future__ import annotations

import sys

from farm.cli.command import FarmTyper
from farm.cli.options import JSON_OPTION, REGISTRY_OPTION, env_option
from farm.cli.output import emit_json, print_table, stdout_console
from foundation.errors import BadInput, NotFound, quoted
from foundation.registry.opening import open_store

app = FarmTyper(rich_markup_mode=None)  # its command joins `farm registry` (farm.cli.registry)

# Ids one command takes per option: more is a list to give in parts (or --model, --unusable).
MAX_IDS = 10_000
# Records the text output lists; --json lists every one.
SHOWN = 50
COLUMNS = ("record", "workload", "target", "tvm", "mean", "job", "why")


@app.command()
def forget(
    record: list[int] = env_option([], "--record", command="registry", metavar="ID",
                                   help="A tuning record's id, as a 'left out' warning names it (repeatable)."),
    workload: list[int] = env_option([], "--workload", command="registry", metavar="ID",
                                     help="Every record of this workload (repeatable)."),
    model: list[str] = env_option([], "--model", command="registry", metavar="MODEL",
                                  help="Every record of the model's tasks' workloads: a model id or a name, as "
                                       "`farm registry ls` lists them (repeatable); a name means each of its batches "
                                       "unless --batch says one. Other models' tasks of the same workload share "
                                       "those records."),
    batch: int | None = env_option(None, "--batch", command="registry", metavar="N",
                                   help="With --model NAME: that batch only."),
    unusable: bool = env_option(False, "--unusable", command="registry",
                                help="Only the chosen records that cannot be used: a trace that does not replay "
                                     "on its workload, or a mean time below 2 ns. Alone: every record of the "
                                     "fingerprint is checked."),
    fingerprint: str | None = env_option(None, "--fingerprint", command="registry", metavar="ID",
                                         help="The fingerprint whose records go (default: this box's, for "
                                              "--target); records of others are never touched."),
    target: str = env_option("llvm", "--target", command="registry", metavar="TARGET",
                             help="Which of this box's fingerprints is the default: llvm or cuda."),
    dry_run: bool = env_option(False, "--dry-run", command="registry",
                               help="List what would be removed; remove nothing."),
    registry: str | None = REGISTRY_OPTION,
    json_output: bool = JSON_OPTION,
) -> None:
    """Remove tuning records of one fingerprint: by --record, --workload or --model, or those that
    cannot be used (--unusable). Their measurements go with them, all in one transaction; a job tunes
    their workloads from what is left. A sync from a registry or pack that still holds them brings
    them back."""
    from foundation.domain.request_limits import BATCH, MAX_TEXT_LENGTH, ROW_ID, check_number, check_text
    from foundation.registry.record_removal import RecordChoice

    if not (record or workload or model or unusable):
        raise BadInput("say which records to forget",
                       "give --record ID, --workload ID, --model MODEL, or --unusable (the records that cannot "
                       "be used)")
    if batch is not None and not model:
        raise BadInput("--batch narrows --model, and no --model was given", "give --model NAME with --batch")
    for name, ids in (("--record", record), ("--workload", workload), ("--model", model)):
        if len(ids) > MAX_IDS:
            raise BadInput(f"{name} was given {len(ids):,} times, more than the {MAX_IDS:,} a command takes",
                           "forget them in parts")
    for name, ids in (("--record", record), ("--workload", workload)):
        for value in ids:
            check_number(name, value, ROW_ID)
    for value in model:
        check_text("--model", value, MAX_TEXT_LENGTH, required=True)
    check_number("--batch", batch, BATCH)
    store = open_store(registry)
    fingerprint_id = _fingerprint(store, fingerprint, target)
    choice = RecordChoice(fingerprint_id, tuple(record), tuple(workload), _model_ids(store, model, batch),
                          every=not (record or workload or model))
    chosen, checked, why = _chosen(store, choice, unusable, progress=not json_output)
    removed = None if dry_run or not chosen else store.record_removal.remove([r["id"] for r in chosen])
    for entry in chosen:
        entry["why"] = why.get(entry["id"])
    document = {
        "registry": str(store.url),
        "fingerprint": fingerprint_id,
        "dry_run": dry_run,
        "unusable_only": unusable,
        "checked": checked,
        "records": chosen,
        "removed": None if removed is None else {"records": removed.records, "measurements": removed.measurements},
    }
    if json_output:
        emit_json(document)
        return
    print_table(COLUMNS, [_row(r) for r in chosen[:SHOWN]],
                empty=f"no record of fingerprint {fingerprint_id} is chosen: nothing to remove")
    if len(chosen) > SHOWN:
        print(f"... and {len(chosen) - SHOWN:,} more (--json lists every one)")
    if chosen:
        stdout_console().print(_summary(document))


def _fingerprint(store, given: str | None, target: str) -> str:  # type: ignore[no-untyped-def]
    from foundation.domain.request_limits import MAX_ID_LENGTH, check_text

    if given is not None:
        check_text("--fingerprint", given, MAX_ID_LENGTH, required=True)
        if store.get_fingerprint(given) is None:
            raise NotFound(f"fingerprint {quoted(given)} is not in the registry",
                           "`farm registry show` lists the fingerprints it holds")
        return given
    from foundation.hardware.targets import local_target

    local, chosen = local_target(target)
    if store.get_fingerprint(local.id) is None:
        raise NotFound(f"this box's fingerprint for {chosen['kind']}, {local.id}, is not in the registry",
                       "give --fingerprint ID: `farm registry show` lists the fingerprints it holds")
    return local.id


def _model_ids(store, given: list[str], batch: int | None) -> tuple[str, ...]:  # type: ignore[no-untyped-def]
    ids: list[str] = []
    models = None
    for name in given:
        if batch is None and store.get_model(name) is not None:
            ids.append(name)
            continue
        models = store.list_models() if models is None else models
        matching = [m.id for m in models if m.name == name and (batch is None or m.batch == batch)]
        if not matching:
            at = "" if batch is None else f" at batch {batch}"
            raise NotFound(f"the registry has no model {quoted(name)}{at}",
                           "`farm registry ls` lists its models, with their ids")
        ids += matching
    return tuple(dict.fromkeys(ids))


def _chosen(store, choice, unusable: bool, *,  # type: ignore[no-untyped-def]
            progress: bool) -> tuple[list[dict], int | None, dict[int, str]]:
    """The chosen records as the output lists them (only the unusable ones with ``unusable``), how
    many were checked (None: no check), and why each unusable one is."""
    chosen: list[dict] = []
    why: dict[int, str] = {}
    checked = 0
    for batch in store.record_removal.chosen(choice):
        if unusable:
            from foundation.meta_schedule.database.record_replay import unusable_records

            found = unusable_records(store, batch)
            why.update(found)
            checked += len(batch)
            if progress:  # a fingerprint's every record takes minutes to replay
                print(f"checked {checked:,} records, {len(why):,} unusable", file=sys.stderr, flush=True)
            batch = [r for r in batch if r.id in found]
        chosen += [_entry(r) for r in batch]
    return chosen, (checked if unusable else None), why


def _entry(stored) -> dict:  # type: ignore[no-untyped-def]
    return {"id": stored.id, "workload_id": stored.workload_id, "target": stored.target,
            "tvm_version": stored.tvm_version, "timing_context": stored.timing_context, "mean_sec": stored.mean_sec,
            "run_secs": stored.run_secs, "measurements": stored.measurements, "job_id": stored.job_id,
            "created_at": stored.created_at.isoformat()}


def _row(entry: dict) -> list:
    from foundation.registry.store import target_kind_of

    mean = "-" if entry["mean_sec"] is None else f"{entry['mean_sec']:.3g} s"
    return [entry["id"], entry["workload_id"], target_kind_of(entry["target"]), entry["tvm_version"], mean,
            entry["job_id"], entry["why"]]


def _summary(document: dict) -> str:
    chosen = len(document["records"])
    of = f" of the {document['checked']:,} checked" if document["checked"] is not None else ""
    kind = "unusable records" if document["unusable_only"] else "records"
    if document["removed"] is None:
        return f"would remove {chosen:,} {kind}{of} of fingerprint {document['fingerprint']} (dry run: nothing removed)"
    removed = document["removed"]
    return (f"removed {removed['records']:,} {kind}{of} of fingerprint {document['fingerprint']}, with "
            f"{removed['measurements']:,} later measurements of them")
