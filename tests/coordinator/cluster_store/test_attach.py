"""Which unfinished job a submit attaches to: a job tuned in rounds (`--until`) has a goal of its own,
so no plain submit joins it, nor it another."""

from __future__ import annotations

from foundation.domain.job_spec import DISTRIBUTED, JobNotes, JobSpec, stored_options
from foundation.domain.tuning_rounds import UntilRequest, parse_goal
from foundation.domain.weights_layout import WeightsLayout

from support.cluster_rows import GPU, T0

TARGET = '{"kind":"llvm"}'
PLAIN = WeightsLayout.PLAIN


def _submit(cluster_store, until: UntilRequest | None = None):
    spec = JobSpec(mode=DISTRIBUTED, weights_layout="plain", trials=8, until=until)
    return cluster_store.jobs.create_job(
        model_id="model-1", target_request="llvm", target_kind="llvm", target=TARGET, fingerprint_id=GPU,
        options=stored_options(spec, JobNotes(PLAIN)), now=T0, attach_in=None if until else PLAIN)


def test_a_plain_submit_never_joins_a_job_tuned_in_rounds(cluster_store):
    rounds, attached = _submit(cluster_store, UntilRequest(parse_goal("2ms")))
    assert not attached
    assert cluster_store.jobs.attachable_job("model-1", TARGET, GPU, PLAIN) is None
    plain, attached = _submit(cluster_store)
    assert not attached and plain.id != rounds.id
    again, attached = _submit(cluster_store)
    assert attached and again.id == plain.id  # equal plain submits still share one job
