"""The template plugin's own tests: packaging and the attention contract from hinge.testing."""

from __future__ import annotations

import pytest
from hinge_template.plugin import TEMPLATE_SDPA

from hinge.config import load_config
from hinge.plugins.plan import resolve_plan
from hinge.plugins.specs import OptionsError
from hinge.testing import AttentionBackendContract, PluginPackagingContract


class TestPackaging(PluginPackagingContract):
    plugin_name = "template"
    distribution = "hinge-plugin-template"


class TestTemplateSDPA(AttentionBackendContract):
    @pytest.fixture
    def spec(self):
        return TEMPLATE_SDPA


@pytest.mark.parametrize("options", [{}, {"upcast": True}])
def test_config_selects_the_backend_by_name(options):
    config = load_config(env={"HINGE_PLUGINS": "template"},  # only the template: no radix cache
                         overrides={"attention": "template-sdpa", "attention_options": options,
                                    "cache": "none"})
    plan = resolve_plan(config, model_info={})
    assert (plan.attention.name, plan.attention.plugin) == ("template-sdpa", "template")
    assert plan.attention.distribution == "hinge-plugin-template"
    backend = plan.build_attention(plan.build_context())
    assert backend.options.upcast == options.get("upcast", False)


def test_unknown_options_are_rejected_listing_upcast():
    config = load_config(env={"HINGE_PLUGINS": "template"},
                         overrides={"attention": "template-sdpa", "attention_options": {"upcat": True}})
    with pytest.raises(OptionsError, match="unknown option 'upcat' .* known options: upcast"):
        resolve_plan(config, model_info={})
