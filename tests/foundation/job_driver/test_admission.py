"""A submit's admission as both modes share it: what it asks, and the library that answers it through the scopes."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine, text

from foundation.domain.job_spec import DISTRIBUTED, EMBEDDED
from foundation.domain.submission import Submission
from foundation.domain.weights_layout import CPU_FORMS, WeightsLayout
from foundation.errors import BadInput
from foundation.hardware.targets import target_json
from foundation.job_driver.admission import asked_job
from foundation.job_driver.hits import LibraryScope, first_hit, library_scopes
from foundation.models.model_key import ModelKey
from foundation.registry.engine import parse_registry_url

KEY = ModelKey("mlp", 1, "zoo", "v1")
ZEN4 = {"arch": "x86_64", "vendor": "AuthenticAMD", "x86_family": 25, "cores": 2, "features": ["avx2", "fma"],
        "llvm_mcpu": "znver4", "llvm_triple": "x86_64-pc-linux-gnu"}
TVM = "0.27.0"


def _target(cores: int) -> str:
    return target_json({"kind": "llvm", "mcpu": "znver4", "mtriple": "x86_64-pc-linux-gnu", "num-cores": cores})


def _library(store, fingerprint_id: str, cores: int, form: WeightsLayout, median_ms: float):
    """A validated artifact of the model under ``fingerprint_id``'s scope (its bytes checked by their sha256
    alone: a library that is no shared object)."""
    return store.add_artifact(
        model_id="m-1", target=_target(cores), fingerprint_id=fingerprint_id, job_id=None, library=b"library",
        lib_format="tar", latency={"mean_ms": median_ms, "median_ms": median_ms, "std_ms": 0.0},
        untuned_latency_mean_ms=None, validation={"passed": True}, tvm_version=TVM, software={},
        weights_layout=form.value)


def _corrupt(registry_url: str, artifact_id: str) -> None:
    """The artifact's stored bytes replaced since it was validated."""
    engine = create_engine(parse_registry_url(registry_url))
    with engine.begin() as connection:
        connection.execute(text("UPDATE artifacts SET library = :lib WHERE id = :id"),
                           {"lib": b"damaged", "id": artifact_id})
    engine.dispose()


@pytest.fixture
def fleet(store):  # type: ignore[no-untyped-def]
    store.upsert_fingerprint("cpu-two", "cpu", "zen4 x2", ZEN4)
    store.upsert_fingerprint("cpu-eight", "cpu", "zen4 x8", {**ZEN4, "cores": 8})
    store.upsert_model(model_id="m-1", name=KEY.name, source="zoo", source_digest=KEY.source_digest, batch=1,
                       inputs=[], weights=[], num_parameters=1)
    return store


def _scopes(store) -> list[LibraryScope]:
    return library_scopes(store, _target(2), "cpu-two", ZEN4)


def test_a_box_without_a_library_of_its_own_is_answered_by_the_same_hardware_at_another_size(fleet):
    theirs = _library(fleet, "cpu-eight", 8, WeightsLayout.PLAIN, 2.0)
    found = first_hit(fleet, KEY, _scopes(fleet), TVM, (WeightsLayout.PLAIN,))
    assert found.artifact == theirs and found.scope == LibraryScope("cpu-eight", _target(8))
    ours = _library(fleet, "cpu-two", 2, WeightsLayout.PLAIN, 5.0)
    found = first_hit(fleet, KEY, _scopes(fleet), TVM, (WeightsLayout.PLAIN,))
    assert found.artifact == ours and found.scope is not None and found.scope.is_own("cpu-two")


def test_auto_is_answered_by_the_fastest_form_of_the_first_scope_and_corrupt_ones_are_told(fleet, registry_url):
    plain = _library(fleet, "cpu-two", 2, WeightsLayout.PLAIN, 3.0)
    _corrupt(registry_url, _library(fleet, "cpu-two", 2, WeightsLayout.PREPACKED, 1.0).id)
    _library(fleet, "cpu-eight", 8, WeightsLayout.PREPACKED, 0.5)  # faster, but another scope's
    auto = asked_job(KEY, Submission("mlp", "llvm").job_spec(EMBEDDED), "llvm")
    assert auto.layout is CPU_FORMS[0] and auto.hit_forms("llvm") == CPU_FORMS
    found = first_hit(fleet, KEY, _scopes(fleet), TVM, auto.hit_forms("llvm"))
    assert found.artifact == plain
    assert [a.weights_layout for a in found.invalidated] == ["prepacked"]
    asked_plain = asked_job(KEY, Submission("mlp", "llvm", weights_layout="plain").job_spec(DISTRIBUTED), "llvm")
    assert asked_plain.hit_forms("llvm") == (WeightsLayout.PLAIN,)


def test_a_form_the_target_cannot_take_is_refused_with_what_is_asked():
    spec = Submission("mlp", "cuda", weights_layout="prepacked").job_spec(EMBEDDED)
    with pytest.raises(BadInput, match="cannot be prepacked for a cuda target"):
        asked_job(KEY, spec, "cuda")
    assert asked_job(KEY, Submission("mlp", "cuda").job_spec(EMBEDDED), "cuda").hit_forms("cuda") == (
        WeightsLayout.PLAIN,)
