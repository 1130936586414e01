"""Every hookspec is documented in pytest's form, and the markers are the public ones."""

from __future__ import annotations

import inspect

import pytest

import hinge
from hinge.plugins import hookspecs

SPECS = ["register_quantizers", "register_attention_backends", "register_speculators",
         "register_cache_policies", "graph_capture_eligibility", "validate_plan", "register_commands",
         "register_grammar_backends"]


def test_the_hookspecs_are_exactly_those_of_the_design():
    marked = sorted(n for n, f in vars(hookspecs).items() if hasattr(f, "hinge_spec"))
    assert marked == sorted(SPECS)


@pytest.mark.parametrize("name", SPECS)
def test_each_hookspec_documents_every_argument_and_how_to_implement_it(name):
    func = getattr(hookspecs, name)
    doc = inspect.getdoc(func) or ""
    assert doc.splitlines()[0].endswith("."), f"{name}: first line must be a one-line summary"
    for arg in inspect.signature(func).parameters:
        assert f":param {arg}:" in doc, f"{name}: no :param {arg}:"
    assert "Called once" in doc, f"{name}: must say when it runs"
    assert "Implementing this hook" in doc


def test_hookimpl_is_importable_from_hinge():
    assert hinge.hookimpl is hookspecs.hookimpl
    assert hookspecs.hookimpl.project_name == "hinge"
