"""A model's key as a request names it (a zoo name, an ONNX file's path): read where it stands, nothing stored."""

from __future__ import annotations

import hashlib

import pytest

from foundation.errors import BadInput, FarmError, NotFound
from foundation.models.model_key import ModelKey, model_key, named_model_key
from foundation.models.zoo import zoo_source_digest


def test_a_zoo_name_is_keyed_by_its_architecture_version():
    assert named_model_key("mlp-tiny", 4) == ModelKey("mlp-tiny", 4, "zoo", zoo_source_digest("mlp-tiny"))


def test_an_onnx_file_is_keyed_by_its_bytes_where_it_stands(tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("FARM_HOME", str(home))
    model = tmp_path / "tiny.onnx"
    model.write_bytes(b"the bytes are hashed, not parsed")
    key = named_model_key(str(model), 1)
    assert key == ModelKey("tiny", 1, "onnx", hashlib.sha256(model.read_bytes()).hexdigest(), model.resolve())
    assert not home.exists()  # a user's file is read in place: only a model given in memory is stored
    assert model_key(str(model), 1) == key  # a name or path without shapes is keyed the same by model_key


@pytest.mark.parametrize("batch", [0, 4097, True, "1"])
def test_a_batch_out_of_bounds_is_refused_before_the_name_is_read(batch):
    with pytest.raises(FarmError, match="batch must"):
        named_model_key("no-such-model", batch)


def test_what_names_no_model_is_refused(tmp_path):
    with pytest.raises(BadInput, match="unknown model 'no-such-model'"):
        named_model_key("no-such-model", 1)
    with pytest.raises(BadInput, match="is a directory"):
        named_model_key(str(tmp_path) + "/", 1)
    with pytest.raises(NotFound, match="no such ONNX file"):
        named_model_key(str(tmp_path / "absent.onnx"), 1)
