"""The hooks a hinge plugin may implement. All of them run at build time, never per token.

A plugin is a module (named by an entry point in the group ``hinge.plugins``) holding functions
marked ``@hookimpl`` whose names are the specs below. An impl may take fewer arguments than its
spec; it must not give its arguments defaults. Misspelled hook names fail at load time.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from hinge.plugins.capabilities import GraphPhase, GraphVerdict
    from hinge.plugins.commands import CommandSpec
    from hinge.plugins.plan import ResolvedPlan
    from hinge.plugins.specs import (
        AttentionBackendSpec,
        CachePolicySpec,
        GrammarBackendSpec,
        QuantizerSpec,
        SpeculatorSpec,
    )

PROJECT = "hinge"
hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


# -------------------------------------------------------------------------------------------------
# registration: once per process, right after the plugins load
# -------------------------------------------------------------------------------------------------


@hookspec
def register_quantizers(register: Callable[[QuantizerSpec], None]) -> None:
    """Make quantizers available by name.

    Called once, after every plugin has loaded. Call ``register(QuantizerSpec(...))`` once per
    quantizer; the return value is ignored. The core attributes every spec to your plugin, and a
    name registered by two plugins is an error naming both.

    :param register: callback taking a :class:`hinge.plugins.QuantizerSpec`.

    Implementing this hook: registering is not selecting; config picks one quantizer by name
    (or ``auto``: the one whose ``checkpoint_methods`` claim the checkpoint). Give a lazy
    ``"module:attr"`` factory: no CUDA initialisation, kernel imports or I/O here.
    """


@hookspec
def register_attention_backends(register: Callable[[AttentionBackendSpec], None]) -> None:
    """Make attention backends available by name.

    Called once, after every plugin has loaded. Call ``register(AttentionBackendSpec(...))`` once
    per backend; the return value is ignored.

    :param register: callback taking a :class:`hinge.plugins.AttentionBackendSpec`.

    Implementing this hook: declare only what the backend does (page sizes, head dims, sliding
    window, graph phases): every claim is tested by ``hinge.testing.AttentionBackendContract``.
    No CUDA initialisation or kernel imports here; the factory imports them.
    """


@hookspec
def register_speculators(register: Callable[[SpeculatorSpec], None]) -> None:
    """Make speculative decoders available by name.

    Called once, after every plugin has loaded. Call ``register(SpeculatorSpec(...))`` once per
    speculator; the return value is ignored.

    :param register: callback taking a :class:`hinge.plugins.SpeculatorSpec`.

    Implementing this hook: the capabilities say what the target must capture for the drafter
    (``hidden_state_mode``, ``needs_state_tracking``) so the plan can decide graphs. Load no
    draft weights here; the factory does.
    """


@hookspec
def register_cache_policies(register: Callable[[CachePolicySpec], None]) -> None:
    """Make prefix-cache policies available by name.

    Called once, after every plugin has loaded. Call ``register(CachePolicySpec(...))`` once per
    policy; the return value is ignored.

    :param register: callback taking a :class:`hinge.plugins.CachePolicySpec`.

    Implementing this hook: claim ``recurrent_state`` only if the policy stores hybrid models'
    state checkpoints; ``hinge.testing.CachePolicyContract`` checks what you claim.
    """


@hookspec
def register_grammar_backends(register: Callable[[GrammarBackendSpec], None]) -> None:
    """Make structured-output (grammar) backends available by name.

    Called once, after every plugin has loaded. Call ``register(GrammarBackendSpec(...))`` once
    per backend; the return value is ignored. The engine builds its grammar backend
    (``xgrammar``, built in) when the first request with a grammar arrives:
    ``factory(options, build)`` gets ``build.tokenizer`` and ``build.model_config`` and returns a
    :class:`hinge.grammar.GrammarBackend` that compiles JSON schemas, regexes and EBNF into
    per-request :class:`hinge.grammar.GrammarMatcher` objects (token bitmasks on the host).

    :param register: callback taking a :class:`hinge.plugins.GrammarBackendSpec`.

    Implementing this hook: declare in ``GrammarCapabilities.kinds`` only what ``compile``
    accepts, and ``rollback`` only if matchers undo tokens; ``hinge.testing.GrammarBackendContract``
    checks both. No grammar library import here; the factory imports it.
    """


# -------------------------------------------------------------------------------------------------
# planning: once, after config selected one component per slot
# -------------------------------------------------------------------------------------------------


@hookspec
def validate_plan(plan: ResolvedPlan) -> list[str] | None:
    """Say why a combination of selected components cannot work.

    Called once per plan, after every slot is resolved and before graph decisions
    (``plan.graphs`` is still empty). Return a list of human-readable reasons, or an empty list
    / None when you have no objection. Every impl runs; all reasons from all plugins are joined
    into one start-up error, each prefixed with the plugin that gave it.

    :param plan: the :class:`hinge.plugins.plan.ResolvedPlan` so far (selected components,
        their options, config).

    Implementing this hook: only object to combinations that involve your components; say what
    to change ("set page_size to 64", "select attention fa4"). Do not raise, build or import
    kernels.
    """


# -------------------------------------------------------------------------------------------------
# graphs: once per phase (prefill, decode, draft)
# -------------------------------------------------------------------------------------------------


@hookspec
def graph_capture_eligibility(phase: GraphPhase, plan: ResolvedPlan) -> GraphVerdict | None:
    """Veto (or cap) CUDA-graph capture of one phase.

    Called once per phase (``prefill``, ``decode``, ``draft``) while the plan is resolved, after
    the selected components' capabilities have been combined. Return
    ``GraphVerdict(allow=False, reason=...)`` to veto, ``GraphVerdict(allow=True,
    max_batch=n)`` to cap the captured batch sizes, or None for no opinion. Every impl runs and
    any veto wins; the smallest ``max_batch`` wins. A veto under ``graphs.<phase> = require`` is
    a start-up error carrying your reason; under ``auto`` the phase runs eager and the reason is
    shown by ``hinge plan``.

    :param phase: ``"prefill"``, ``"decode"`` or ``"draft"``.
    :param plan: the resolved plan (selected components and config; graphs not decided yet).

    Implementing this hook: decide from the plan alone (no CUDA calls); give a reason a user can
    act on.
    """


# -------------------------------------------------------------------------------------------------
# commands: once, when the ``hinge`` command line is built
# -------------------------------------------------------------------------------------------------


@hookspec
def register_commands(register: Callable[[CommandSpec], None]) -> None:
    """Add subcommands to the ``hinge`` command line (e.g. ``hinge quantize``).

    Called once, when ``hinge`` builds its argument parser (``hinge.plugins.commands``). Call
    ``register(CommandSpec(name, help, add_arguments, run))`` once per command; the return value
    is ignored. ``add_arguments(parser)`` adds the command's flags to its ``argparse`` parser;
    ``run(args)`` runs it and returns the exit status. Both may be ``"module:attr"`` strings,
    imported only when the command is used. A name hinge itself uses, or one two plugins
    register, is refused with a warning naming the owners; neither plugin's command is added.

    :param register: callback taking a :class:`hinge.plugins.commands.CommandSpec`.

    Implementing this hook: import nothing heavy here (``hinge --help`` builds every parser).
    ``run`` reports user errors by raising ``ValueError`` / ``FileNotFoundError``: ``hinge``
    prints them as one ``hinge: error: ...`` line and exits 2, as for its own commands.
    """
