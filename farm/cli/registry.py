"""`farm registry init|ls|show|import|export|sync|upgrade` (prune|pin|unpin: farm.cli.registry_retention;
forget: farm.cli.registry_forget).

`init`, `import` and `sync` (its TO) may create the registry; `ls`, `show`, `export` and
`upgrade` need one to exist and create nothing.
"""

from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import typer

from farm.cli import registry_forget, registry_retention
from farm.cli.command import FarmTyper
from farm.cli.options import JSON_OPTION, REGISTRY_OPTION, env_option
from farm.cli.output import emit_json, print_fields, print_table, stdout_console
from foundation.errors import BadInput, NotFound, path_error, quoted
from foundation.registry.opening import open_store

# What `farm registry ls` counts, in this order (the registry's own tables; the distributed
# mode's bookkeeping is left out).
_COUNTED = ("fingerprints", "models", "workloads", "tuning_records", "jobs", "artifacts")

app = FarmTyper(no_args_is_help=True, rich_markup_mode=None)  # plain help: see farm.cli.app
app.add_typer(registry_retention.app)  # prune, pin, unpin
app.add_typer(registry_forget.app)  # forget

FINGERPRINT_OPTION = env_option(
    None, "--fingerprint", command="registry", metavar="ID",
    help="Fingerprint id the records belong to (default: this box's, for --target).",
)
TARGET_OPTION = env_option("llvm", "--target", command="registry", metavar="TARGET",
                           help="Target the records were tuned for: llvm, cuda or a JSON object.")


def _plain(entity) -> dict:
    data = dataclasses.asdict(entity)
    data.pop("library", None)
    return data


@app.command()
def init(registry: str | None = REGISTRY_OPTION, json_output: bool = JSON_OPTION) -> None:
    """Create the registry (SQLite file or an empty PostgreSQL database) at the newest schema."""
    from foundation.config import shipped_packs_wanted
    from foundation.registry.migrate import head_revision
    from foundation.registry.shipped_packs import is_new, load_shipped_packs

    store = open_store(registry, create=True)
    packs = load_shipped_packs(store) if shipped_packs_wanted() and is_new(store) else {}
    document = {"registry": str(store.url), "revision": head_revision(),
                "packs": {name: counts.to_json() for name, counts in packs.items()}}
    if json_output:
        emit_json(document)
        return
    console = stdout_console()
    console.print(f"registry {document['registry']} is ready (schema revision {document['revision']})")
    for name, counts in packs.items():
        console.print(f"pack     {name}: {counts.records:,} records, {counts.fingerprints} fingerprints")


@app.command("ls")
def ls(registry: str | None = REGISTRY_OPTION, json_output: bool = JSON_OPTION) -> None:
    """Summarise the registry: row counts, fingerprints, models and artifacts."""
    from farm.cli.views import ARTIFACT_COLUMNS, artifact_rows

    store = open_store(registry)
    models, artifacts = store.list_models(), store.list_artifacts()
    document = {
        "registry": str(store.url),
        "counts": store.counts(),
        "fingerprints": [_plain(f) for f in store.list_fingerprints()],
        "models": [_plain(m) for m in models],
        "artifacts": [_plain(a) for a in artifacts],
    }
    if json_output:
        emit_json(document)
        return
    counts = document["counts"]
    print_fields([("Registry", document["registry"]),
                  ("Rows", ", ".join(f"{counts[k]:,} {k.replace('_', ' ')}" for k in _COUNTED if k in counts))])
    print()
    print_table(ARTIFACT_COLUMNS, artifact_rows(artifacts, {m.id: m for m in models}),
                empty="no artifacts yet: `farm submit` tunes and stores one")


@app.command()
def show(
    ident: str | None = typer.Argument(
        None, metavar="ID", help="An artifact (art-…), job (job-…), model or fingerprint id; none: every fingerprint."),
    registry: str | None = REGISTRY_OPTION,
    json_output: bool = JSON_OPTION,
) -> None:
    """Show one registry entry in full; without an id, what the registry holds per fingerprint."""
    from farm.cli.views import field_value
    from foundation.registry.entities import Fingerprint

    store = open_store(registry)
    if ident is None:
        holdings = store.holdings.per_fingerprint()
        if json_output:
            emit_json({"registry": str(store.url), "fingerprints": [h.to_json() for h in holdings]})
            return
        print_table(HOLDINGS_COLUMNS, [_holdings_row(h) for h in holdings],
                    empty="no fingerprints yet: `farm submit` or `farm registry import` adds this box's")
        return
    entity = _lookup(store, ident)
    document = _plain(entity)
    if isinstance(entity, Fingerprint):
        held = next(h for h in store.holdings.per_fingerprint() if h.id == ident).to_json()
        document["holds"] = {k: v for k, v in held.items() if k not in ("id", "kind", "summary")}
    if json_output:
        emit_json(document)
        return
    print_fields((name, field_value(value)) for name, value in document.items())


HOLDINGS_COLUMNS = ("fingerprint", "kind", "records", "valid", "workloads", "models", "artifacts", "cost models",
                    "summary")


def _holdings_row(h) -> list:
    return [h.id, h.kind, f"{h.records:,}", f"{h.valid_records:,}", f"{h.workloads:,}", h.models, h.artifacts,
            "-" if h.cost_models is None else h.cost_models, h.summary]


def _lookup(store, ident: str):
    if ident.startswith("art-"):
        return store.get_artifact(ident)
    if ident.startswith("job-"):
        return store.get_job(ident)
    found = store.get_fingerprint(ident) or store.get_model(ident)
    if found is None:
        raise NotFound(f"nothing in the registry has id {quoted(ident)}", "see `farm registry ls` for ids")
    return found


@app.command("import")
def import_logs(
    path: Path = typer.Argument(
        ..., metavar="DIR", help="A directory with TVM's database_workload.json and database_tuning_record.json."),
    target: str = TARGET_OPTION,
    fingerprint: str | None = FINGERPRINT_OPTION,
    registry: str | None = REGISTRY_OPTION,
    json_output: bool = JSON_OPTION,
) -> None:
    """Import a TVM MetaSchedule JSON database for a fingerprint: checked whole first, then stored."""
    from farm.cli.progress import ConsoleProgress
    from foundation.meta_schedule.database.tvm_logs import read_tvm_logs, store_tvm_logs, worth_telling
    from foundation.registry.opening import open_store

    if not path.exists():  # before the registry is opened, and maybe created
        raise NotFound(f"no such directory: {path}", "give the work_dir of a TVM JSONDatabase")
    # All or nothing: the log is read and checked whole before the registry is created or the
    # fingerprint row written, so a refused import leaves no registry, and no row, behind.
    ctx, fp_id = _import_context(registry, target, fingerprint)
    # Stage lines on stderr as a submit's: a log of 100,000 records takes minutes to check and store.
    progress = ConsoleProgress().stage if worth_telling(path) and not json_output else None
    log = read_tvm_logs(path, fp_id, ctx.target_json, ctx.tvm_version, ctx.software, progress=progress)
    if ctx.store is None:
        ctx = dataclasses.replace(ctx, store=open_store(registry, create=True))
    if fp_id == ctx.fingerprint.id:  # imported records need their fingerprint row, also in a fresh registry
        fp = ctx.fingerprint
        ctx.store.upsert_fingerprint(fp.id, fp.kind, fp.summary, fp.details)
    report = store_tvm_logs(ctx.store, log, progress)
    document = {"fingerprint": fp_id, "target": ctx.target_json, **dataclasses.asdict(report)}
    if json_output:
        emit_json(document)
    else:
        console = stdout_console()
        console.print(
            f"imported {report.records} new records of {report.workloads} workloads for {fp_id}"
            f" ({report.measurements} new measurements of records it had, {report.skipped_duplicates} already present)"
        )
        if report.refused_foreign:
            console.print(
                f"filed {report.refused_foreign} records tuned for another target ({report.foreign_target}) as seeds "
                f"under {', '.join(report.seed_fingerprints)} ({report.seeds} new): never this fingerprint's "
                f"measurements, a submit measures them here first")


@app.command("export")
def export_logs(
    path: Path = typer.Argument(
        ..., metavar="DIR", help="Directory to write database_workload.json and database_tuning_record.json to."),
    target: str = TARGET_OPTION,
    fingerprint: str | None = FINGERPRINT_OPTION,
    registry: str | None = REGISTRY_OPTION,
    json_output: bool = JSON_OPTION,
) -> None:
    """Export a fingerprint's records as a TVM MetaSchedule JSON database."""
    from foundation.meta_schedule.database.tvm_logs import export_tvm_logs

    _check_writable_directory(path)
    ctx, fp_id = _context_for(registry, target, fingerprint)
    try:
        counts = export_tvm_logs(ctx.store, path, fp_id, ctx.target_json, ctx.tvm_version)
    except OSError as err:
        raise path_error(err, err.filename or path, doing="write the logs into") from None
    counts = dataclasses.asdict(counts) if dataclasses.is_dataclass(counts) else dict(counts)
    document = {"fingerprint": fp_id, "target": ctx.target_json, "directory": str(path), **counts}
    if json_output:
        emit_json(document)
    else:
        stdout_console().print(f"wrote {counts['records']} records of {counts['workloads']} workloads for "
                               f"{fp_id} to {path}")


def _arriving_record_check():
    """The replay check of records arriving in a sync (record_replay.ArrivingRecordCheck), made at the
    first record it is asked about: a sync that brings no record never starts TVM."""
    made = None

    def check(mod_json: str, record: dict) -> str | None:
        nonlocal made
        if made is None:
            from foundation.meta_schedule.database.record_replay import ArrivingRecordCheck

            made = ArrivingRecordCheck()
        return made(mod_json, record)

    return check


@app.command()
def sync(
    source: str = typer.Argument(..., metavar="FROM", help="The registry to copy from: a URL (sqlite:///..., "
                                 "postgresql://...), a SQLite file's path, a pack (a .farmpack file), or a "
                                 "coordinator (grpc://HOST:PORT; its token and TLS files as FARM_TOKEN, "
                                 "FARM_TOKEN_FILE and FARM_TLS_* give them)."),
    destination: str = typer.Argument(..., metavar="TO", help="The registry to copy into (created if it is a new "
                                      "SQLite file or an empty database), a pack (.farmpack: written, or "
                                      "added to), or a coordinator (grpc://HOST:PORT)."),
    fingerprint: str | None = env_option(None, "--fingerprint", command="registry", metavar="ID",
                                         help="Only this fingerprint's records, jobs, artifacts and cost model."),
    model: str | None = env_option(None, "--model", command="registry", metavar="NAME",
                                   help="Only this model's (a zoo name or an ONNX file's name) jobs, artifacts and "
                                        "the records its jobs measured."),
    target: str | None = env_option(None, "--target", command="registry", metavar="TARGET",
                                    help="Only rows of this target kind (llvm, cuda) or canonical target JSON."),
    artifacts: bool = env_option(True, "--artifacts/--no-artifacts", command="registry",
                                 help="Copy the stored libraries too (--no-artifacts: records, jobs and cost models "
                                      "only, as the packs tvm-farm ships)."),
    dry_run: bool = env_option(False, "--dry-run", command="registry",
                               help="Count what would be copied; write nothing."),
    json_output: bool = JSON_OPTION,
) -> None:
    """Copy into TO what FROM holds and TO lacks: fingerprints, models, finished jobs, workloads,
    records with every measurement, cost models and artifacts (sha256 checked on both ends).
    Safe to stop at any point: the next run finishes the copy; a second run copies nothing."""
    import sys
    import tempfile

    from foundation.registry.engine import RegistryMissing
    from foundation.registry.packs import in_memory_registry, is_pack, read_pack, write_pack
    from foundation.registry.store import RegistryStore
    from foundation.registry.sync import SyncFilter, sync_registries

    only = SyncFilter(fingerprint=fingerprint, model=model, target=target, artifacts=artifacts)
    spool = Path(tempfile.mkdtemp(prefix="farm-sync-"))
    try:
        # A pack or a coordinator on either side is an in-memory registry: read whole and checked first,
        # written (or sent) at the end.
        if _is_coordinator(source):
            source_store = read_pack(_coordinator_pack(source, only, spool / "from.farmpack"))[0]
        else:
            source_store = read_pack(Path(source))[0] if is_pack(source) else open_store(_registry_url(source))
        if _is_coordinator(destination):
            destination_store = (read_pack(_coordinator_pack(destination, only, spool / "to.farmpack"))[0]
                                 if dry_run else in_memory_registry())
        elif is_pack(destination):
            pack = Path(destination)
            if pack.exists():
                destination_store = read_pack(pack)[0]
            else:
                _check_writable_directory(pack.parent if str(pack.parent) else Path("."))
                destination_store = in_memory_registry()
        else:
            try:
                destination_store = open_store(_registry_url(destination), create=not dry_run)
            except RegistryMissing:
                if not dry_run:
                    raise
                destination_store = RegistryStore("sqlite://")  # TO is new: a dry run counts everything as missing

        def progress(what: str, done: int, of: int) -> None:
            if not json_output and of:
                print(f"{what.replace('_', ' '):<15} {done:,} of {of:,}", file=sys.stderr, flush=True)

        # Records are checked on their way into a registry or pack; a coordinator checks its own.
        check = None if _is_coordinator(destination) else _arriving_record_check()
        counts = sync_registries(source_store, destination_store, only, dry_run=dry_run, progress=progress,
                                 check=check)
        copied = counts.to_json()
        if is_pack(destination) and not dry_run:
            write_pack(destination_store, Path(destination), _pack_about())
        elif _is_coordinator(destination) and not dry_run:
            # What the coordinator's registry lacked of it is what its sync copies: its counts are the answer.
            write_pack(destination_store, spool / "sent.farmpack", _pack_about())
            copied = _coordinator(destination).client().import_pack(spool / "sent.farmpack")
    finally:
        shutil.rmtree(spool, ignore_errors=True)
    refused = copied.get("skipped", {}).get("refused_records", 0)
    if refused:
        print(f"warning: {refused} record(s) were refused, not copied (times no kernel takes, or a trace that "
              f"does not replay on its workload); the first: {copied.get('refused_reason')}", file=sys.stderr)
    named = {"from": source, "to": destination}
    document = {side: given if is_pack(given) or _is_coordinator(given) else str(_registry_url(given))
                for side, given in named.items()} | {"dry_run": dry_run, "copied": copied}
    if json_output:
        emit_json(document)
        return
    copied = dict(copied)
    skipped = copied.pop("skipped", {})
    copied.pop("refused_reason", None)
    verb = "would copy" if dry_run else "copied"
    parts = [f"{n:,} {k.replace('_', ' ')}" for k, n in copied.items() if n and k != "artifact_bytes"]
    stdout_console().print(f"{verb} {', '.join(parts) if parts else 'nothing: TO has all FROM holds'}"
                           + "".join(f"; skipped {n} {k.replace('_', ' ')}" for k, n in skipped.items()))


def _is_coordinator(location: str) -> bool:
    return location.startswith("grpc://")


def _coordinator(location: str):  # type: ignore[no-untyped-def]
    """The coordinator a grpc://HOST:PORT side names, with the credentials of the environment
    (FARM_TOKEN or FARM_TOKEN_FILE, FARM_TLS_CA, FARM_TLS_CERT, FARM_TLS_KEY), as --coordinator has."""
    import os

    from farm.connection import Coordinator

    def path(name: str) -> Path | None:
        return Path(os.environ[name]) if os.environ.get(name) else None

    return Coordinator(location.removeprefix("grpc://"), token_file=path("FARM_TOKEN_FILE"),
                       tls_ca=path("FARM_TLS_CA"), tls_cert=path("FARM_TLS_CERT"), tls_key=path("FARM_TLS_KEY"))


def _coordinator_pack(location: str, only, path: Path) -> Path:  # type: ignore[no-untyped-def]
    """What the coordinator at ``location`` holds of ``only``, as a pack at ``path`` (ExportPack)."""
    _coordinator(location).client().export_pack(path, fingerprint=only.fingerprint, model=only.model,
                                                target=only.target, artifacts=only.artifacts)
    return path


def _pack_about() -> dict:
    """Who made a pack: the command, this box's CPU, the date, the TVM version (its header says so)."""
    import platform
    import sys

    from foundation.clock import utc_now
    from foundation.hardware.versions import tvm_version

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"command": " ".join(["farm", *sys.argv[1:]]), "cpu": cpu, "created": utc_now().isoformat(),
            "tvm_version": tvm_version()}


def _registry_url(given: str) -> str:
    """A registry URL as given, or a SQLite file's path as its URL."""
    if "://" in given:
        return given
    return f"sqlite:///{Path(given).expanduser().resolve()}"


@app.command()
def upgrade(
    registry: str | None = REGISTRY_OPTION,
    create: bool = env_option(False, "--create", command="registry",
                              help="Create the registry in an empty database instead of refusing it "
                                   "(the deploy recipes' migration step, first start included)."),
    json_output: bool = JSON_OPTION,
) -> None:
    """Migrate the registry's schema to the version this farm needs."""
    from foundation.config import registry_url
    from foundation.registry.engine import masked, parse_registry_url
    from foundation.registry.migrate import upgrade_registry

    url = registry_url(registry)
    revision = upgrade_registry(url, create=create)
    if json_output:  # without the password, which FARM_REGISTRY_FILE keeps out of sight
        emit_json({"registry": masked(parse_registry_url(url)), "revision": revision})
    else:
        stdout_console().print(f"registry is at revision {revision}")


def _check_writable_directory(path: Path) -> None:
    """Refuse an output directory that cannot be made or written, before any work."""
    import os

    if path.exists() and not path.is_dir():
        raise BadInput(f"{path} is a file, not a directory", "give a directory to write the two logs into")
    existing = path
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        raise BadInput(f"cannot write into {path}: {existing} is not a writable directory",
                       "choose a directory you can write to")


def _import_context(registry: str | None, target: str, fingerprint: str | None):
    """`_context_for` an import, creating nothing: where there is no registry yet, the context's
    store is None (the import creates it once the log is read), and only this box's fingerprint
    can be imported for (a fresh registry knows no other)."""
    from farm.session import FarmContext
    from foundation.hardware.targets import local_target
    from foundation.registry.engine import RegistryMissing

    try:
        return _context_for(registry, target, fingerprint)
    except RegistryMissing as missing:
        from foundation.hardware.targets import target_json
        from foundation.hardware.versions import tvm_version

        local, chosen = local_target(target)
        if fingerprint is not None and fingerprint != local.id:
            raise _unknown_fingerprint(fingerprint, chosen["kind"], local.id, f": {missing.problem} yet") from None
        return FarmContext(None, local, chosen, target_json(chosen), tvm_version()), local.id


def _unknown_fingerprint(fingerprint: str, kind: str, local_id: str, why: str = "") -> NotFound:
    return NotFound(
        f"fingerprint {quoted(fingerprint)} is not in the registry{why} (this box's, for target {kind}, is {local_id})",
        "import on a box of that fingerprint, or let one of its agents register with this registry "
        "first; `farm registry show` lists the fingerprints it knows",
    )


def _context_for(registry: str | None, target: str, fingerprint: str | None):
    """The context and fingerprint id records are imported for or exported from: this box's, or
    another one the registry knows already (its details, not this box's, give the target)."""
    from farm.session import open_context

    ctx = open_context(registry, target)
    if fingerprint is None or fingerprint == ctx.fingerprint.id:
        return ctx, ctx.fingerprint.id
    stored = ctx.store.get_fingerprint(fingerprint)
    if stored is None:
        raise _unknown_fingerprint(fingerprint, ctx.target["kind"], ctx.fingerprint.id)
    # The target's details (mcpu, cores, arch) come from that fingerprint, not from this box.
    from foundation.hardware.fingerprint import Fingerprint
    from foundation.hardware.targets import canonical_target, target_json

    other = Fingerprint(stored.id, stored.kind, stored.summary, stored.details)
    ctx.target = canonical_target(target, other)
    ctx.target_json = target_json(ctx.target)
    return ctx, fingerprint
