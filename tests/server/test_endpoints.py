"""Endpoint shapes in-process over the fake engine: /version, /flush_cache on GET and POST,
model cards and served names, and the error body on 404, 405, 400 and 500."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from fake_engine import FakeEngine
from fastapi.testclient import TestClient

import hinge
from hinge.engine.async_engine import AsyncEngine
from hinge.server.app import build_app, model_names


def client_for(engine: FakeEngine | None = None, **kwargs) -> TestClient:
    kwargs.setdefault("model_name", "fake")
    app = build_app(AsyncEngine(engine or FakeEngine()), **kwargs)
    return TestClient(app, raise_server_exceptions=False)


def assert_error_shape(resp, status: int) -> dict:
    """The OpenAI/vLLM error body: {"error": {"message", "type", "code"}} with code == status."""
    assert resp.status_code == status, resp.text
    assert resp.headers["content-type"].startswith("application/json")
    body = resp.json()
    assert set(body) == {"error"}, body
    error = body["error"]
    assert error["code"] == status and isinstance(error["type"], str) and error["type"]
    assert isinstance(error["message"], str) and error["message"]
    return error


def test_version_is_the_package_version_as_sglang_answers_it():
    with client_for() as c:
        resp = c.get("/version")
    assert resp.status_code == 200 and resp.json() == {"version": hinge.__version__}


@pytest.mark.parametrize("method", ["GET", "POST"])
def test_flush_cache_answers_get_and_post(method):
    with client_for() as c:
        resp = c.request(method, "/flush_cache")
    assert resp.status_code == 200 and resp.json()["success"] is True


def test_unknown_route_is_404_in_the_error_shape_naming_the_route():
    with client_for() as c:
        error = assert_error_shape(c.get("/v1/no-such-route"), 404)
    assert "GET /v1/no-such-route" in error["message"]


@pytest.mark.parametrize("method, path, allowed", [
    ("PUT", "/v1/models", "GET"), ("GET", "/generate", "POST"), ("DELETE", "/flush_cache", "GET"),
])
def test_wrong_method_is_405_in_the_error_shape_with_the_allowed_methods(method, path, allowed):
    with client_for() as c:
        resp = c.request(method, path)
    error = assert_error_shape(resp, 405)
    assert method in error["message"] and path in error["message"]
    assert allowed in resp.headers["allow"]


@pytest.mark.parametrize("path, body", [
    ("/generate", {"text": "a", "sampling_params": {"temperature": "hot"}}),
    ("/v1/completions", {"prompt": "a", "max_tokens": -1}),
    ("/abort_request", {}),
])
def test_validation_errors_are_400_in_the_error_shape(path, body):
    with client_for() as c:
        assert_error_shape(c.post(path, json=body), 400)


def test_an_unexpected_fault_is_500_in_the_error_shape():
    engine = FakeEngine()
    engine.server_info = lambda: 1 / 0  # a bug inside a route, not an engine step failure
    with client_for(engine) as c:
        error = assert_error_shape(c.get("/server_info"), 500)
    assert "ZeroDivisionError" in error["message"]


def test_models_lists_every_served_name_and_each_card_can_be_fetched():
    with client_for(model_name=["alpha", "beta"], model_root="/ckpt/alpha") as c:
        listed = c.get("/v1/models").json()
        one = c.get("/v1/models/beta").json()
    assert [card["id"] for card in listed["data"]] == ["alpha", "beta"]
    assert all(card["object"] == "model" and card["root"] == "/ckpt/alpha"
               and card["max_model_len"] == 128 for card in listed["data"])
    assert one == listed["data"][1]


def test_a_model_id_with_slashes_is_one_id():
    with client_for(model_name="org/model-7b") as c:
        resp = c.get("/v1/models/org/model-7b")
    assert resp.status_code == 200 and resp.json()["id"] == "org/model-7b"


def test_an_unknown_model_id_is_404_in_the_error_shape_naming_the_served_ones():
    with client_for(model_name=["alpha"]) as c:
        error = assert_error_shape(c.get("/v1/models/gpt-9"), 404)
    assert "'gpt-9'" in error["message"] and "'alpha'" in error["message"]
    assert error["type"] == "model_not_found"


def test_a_request_is_answered_with_the_name_it_used_or_the_first_served_name():
    with client_for(model_name=["alpha", "beta"], model_aliases={"default"}) as c:
        named = c.post("/v1/completions", json={"model": "beta", "prompt": "a", "max_tokens": 1})
        alias = c.post("/v1/chat/completions", json={
            "model": "default", "messages": [{"role": "user", "content": "a"}], "max_tokens": 1})
        unnamed = c.post("/v1/completions", json={"prompt": "a", "max_tokens": 1})
        other = c.post("/v1/completions", json={"model": "gamma", "prompt": "a", "max_tokens": 1})
    assert named.json()["model"] == "beta"
    assert alias.json()["model"] == "default"
    assert unnamed.json()["model"] == "alpha"
    assert assert_error_shape(other, 404)["type"] == "model_not_found"


def test_without_served_names_the_model_is_its_path_and_answers_to_its_folder_and_default():
    names, aliases = model_names(SimpleNamespace(model="/ckpt/qwen3-0.6b/"))
    assert names == ["/ckpt/qwen3-0.6b/"] and aliases == {"qwen3-0.6b", "default"}
    names, aliases = model_names(SimpleNamespace(model=None))
    assert names == ["default"]


def test_served_names_replace_the_path_and_default_still_names_the_model():
    names, aliases = model_names(SimpleNamespace(model="/ckpt/qwen3"), ["qwen", "q", "qwen"])
    assert names == ["qwen", "q"] and aliases == {"default"}
