"""PluginPackagingContract: the installed distribution exposes an entry point in
``hinge.plugins``, loads with status ok, imports no kernels or CUDA, registers components whose
options reject unknown keys, and registers the same specs in a fresh manager every time."""

from __future__ import annotations

import importlib.metadata as md
import subprocess
import sys
import textwrap

import pytest

from hinge.config import PluginSettings
from hinge.plugins.manager import ENTRY_POINT_GROUP, get_plugin_manager
from hinge.plugins.specs import OptionsError

#: modules a plugin must not import when it is loaded (its factories may)
HEAVY_MODULES = ("triton", "flash_attn", "flashinfer", "fla", "cutlass", "mamba_ssm",
                 "causal_conv1d", "deep_gemm", "modelopt")


class PluginPackagingContract:
    """Subclass and set ``plugin_name`` (the entry-point name) and ``distribution``."""

    plugin_name: str = ""
    distribution: str = ""
    heavy_modules: tuple[str, ...] = HEAVY_MODULES

    @pytest.fixture
    def entry_point(self) -> md.EntryPoint:
        assert self.plugin_name and self.distribution, (
            f"{type(self).__name__} must set plugin_name and distribution")
        eps = [ep for ep in md.entry_points(group=ENTRY_POINT_GROUP) if ep.name == self.plugin_name]
        assert eps, (f"no entry point {self.plugin_name!r} in group {ENTRY_POINT_GROUP!r}; is "
                     f"{self.distribution} installed (pip install -e .)?")
        return eps[0]

    @pytest.fixture
    def plugin_manager_with_plugin(self):
        return get_plugin_manager(PluginSettings(allow=[self.plugin_name]))

    def _record(self, pm):
        return next(r for r in pm.listing() if r["name"] == self.plugin_name)

    def test_plugin_is_installed_and_listed_ok(self, entry_point, plugin_manager_with_plugin):
        record = self._record(plugin_manager_with_plugin)
        assert record["status"] == "ok", f"plugin {self.plugin_name!r}: {record['error']}"
        assert md.distribution(self.distribution).name.lower().replace("_", "-") == \
            (record["distribution"] or "").lower().replace("_", "-")

    def test_registers_at_least_one_component(self, plugin_manager_with_plugin):
        assert self._record(plugin_manager_with_plugin)["components"], "the plugin registers nothing"

    def test_importing_the_plugin_loads_no_kernels_and_no_cuda(self, entry_point):
        code = textwrap.dedent(f"""
            import sys, importlib
            importlib.import_module({entry_point.module!r})
            heavy = [m for m in {self.heavy_modules!r} if m in sys.modules]
            cuda = 'torch' in sys.modules and sys.modules['torch'].cuda.is_initialized()
            print(heavy, cuda)
        """)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert out.returncode == 0, out.stderr
        assert out.stdout.split("\n")[-2] == "[] False", f"imported at load: {out.stdout.strip()}"

    def test_options_models_reject_unknown_options(self, plugin_manager_with_plugin):
        pm = plugin_manager_with_plugin
        for c in pm.records[self.plugin_name].components:
            with pytest.raises(OptionsError):
                c.spec.validate_options({"hinge_contract_no_such_option": 1})

    def test_factories_resolve(self, plugin_manager_with_plugin):
        for c in plugin_manager_with_plugin.records[self.plugin_name].components:
            assert callable(c.spec.load_factory()), f"{c.name}: factory {c.spec.factory!r} is not callable"

    def test_registering_in_fresh_managers_gives_equal_specs(self):
        def specs():
            pm = get_plugin_manager(PluginSettings(allow=[self.plugin_name]))
            return [(c.kind, c.spec) for c in pm.records[self.plugin_name].components]

        assert specs() == specs()
