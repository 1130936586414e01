"""Tokenizer, chat template and incremental detokenizer, read from a local Hugging Face directory.

Reads ``tokenizer.json`` with the ``tokenizers`` library (no ``transformers`` at run time),
``tokenizer_config.json`` (special tokens, ``add_bos_token``/``add_eos_token``, chat template),
``chat_template.jinja`` when present, and ``generation_config.json`` (extra eos ids). Encoding,
decoding and chat rendering follow transformers' ``PreTrainedTokenizerFast`` so token ids agree.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from datetime import datetime
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2
import jinja2.ext
import jinja2.nodes
import tokenizers
from jinja2.sandbox import ImmutableSandboxedEnvironment

_SPECIAL_KEYS = ("bos_token", "eos_token", "unk_token", "pad_token", "sep_token", "cls_token",
                 "mask_token")
# vLLM/sglang: start the first incremental window a few prompt tokens back, so decoders that strip a
# leading space from the first token of a text (Metaspace) see context.
_PROMPT_CONTEXT_TOKENS = 5


class TokenizerError(ValueError):
    """A tokenizer file is missing or unreadable; the message names the file and what to do."""


class Tokenizer:
    """Text <-> token ids for one model directory (see :meth:`from_pretrained`)."""

    def __init__(
        self,
        backend: tokenizers.Tokenizer,
        *,
        special_tokens: dict[str, str] | None = None,
        chat_template: str | dict[str, str] | None = None,
        extra_eos_token_ids: Iterable[int] = (),
        add_bos_token: bool | None = None,
        add_eos_token: bool | None = None,
        name: str = "<tokenizer>",
    ) -> None:
        self.backend = backend
        self.name = name
        self.special_tokens = {k: v for k, v in (special_tokens or {}).items() if v is not None}
        self.chat_template = chat_template
        vocab = backend.get_vocab(with_added_tokens=True)
        missing = [tok for tok in self.special_tokens.values() if tok not in vocab]
        if missing:  # transformers adds named special tokens the vocabulary lacks
            backend.add_special_tokens(missing)
        self.bos_token_id = self.token_to_id(self.special_tokens.get("bos_token"))
        self.eos_token_id = self.token_to_id(self.special_tokens.get("eos_token"))
        self.pad_token_id = self.token_to_id(self.special_tokens.get("pad_token"))
        # transformers replaces the post-processor only when tokenizer_config.json says
        # add_bos_token/add_eos_token explicitly, or when tokenizer.json has none.
        self._explicit_bos_eos = (add_bos_token is not None or add_eos_token is not None
                                  or backend.post_processor is None)
        self.add_bos_token = bool(add_bos_token) and self.bos_token_id is not None
        self.add_eos_token = bool(add_eos_token) and self.eos_token_id is not None
        eos = [self.eos_token_id] if self.eos_token_id is not None else []
        self.eos_token_ids: list[int] = list(dict.fromkeys([*eos, *extra_eos_token_ids]))

    # ------------------------------------------------------------------ loading

    @classmethod
    def from_pretrained(cls, path: str | Path) -> Tokenizer:
        root = Path(path)
        if not root.is_dir():
            raise TokenizerError(f"model directory {str(root)!r} does not exist or is not a directory")
        tok_file = root / "tokenizer.json"
        if not tok_file.is_file():
            raise TokenizerError(
                f"{tok_file} not found; hinge needs a fast tokenizer file: save one with "
                "transformers' `AutoTokenizer.from_pretrained(...).save_pretrained(dir)`")
        try:
            backend = tokenizers.Tokenizer.from_file(str(tok_file))
        except Exception as exc:  # the Rust side raises plain Exception subclasses
            raise TokenizerError(f"{tok_file} is not a valid tokenizer file: {exc}") from exc
        config = _read_json(root / "tokenizer_config.json")
        gen_config = _read_json(root / "generation_config.json")
        template: Any = config.get("chat_template")
        if (root / "chat_template.jinja").is_file():
            template = (root / "chat_template.jinja").read_text(encoding="utf-8")
        elif (root / "chat_template.json").is_file():
            template = _read_json(root / "chat_template.json").get("chat_template", template)
        if isinstance(template, list):  # named templates: [{"name": ..., "template": ...}]
            template = {t["name"]: t["template"] for t in template}
        special = {key: _token_content(config.get(key)) for key in _SPECIAL_KEYS}
        eos_ids = gen_config.get("eos_token_id")
        eos_ids = [eos_ids] if isinstance(eos_ids, int) else list(eos_ids or [])
        return cls(backend, special_tokens=special, chat_template=template,
                   extra_eos_token_ids=eos_ids, add_bos_token=config.get("add_bos_token"),
                   add_eos_token=config.get("add_eos_token"), name=str(root))

    # ------------------------------------------------------------------ encode / decode

    @property
    def vocab_size(self) -> int:
        """Number of token ids, added tokens included (``len(hf_tokenizer)``)."""
        return self.backend.get_vocab_size(with_added_tokens=True)

    def token_to_id(self, token: str | None) -> int | None:
        return None if token is None else self.backend.token_to_id(token)

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        if not self._explicit_bos_eos:
            return self.backend.encode(text, add_special_tokens=add_special_tokens).ids
        ids = self.backend.encode(text, add_special_tokens=False).ids
        if add_special_tokens:
            ids = ([self.bos_token_id] if self.add_bos_token else []) + ids
            ids = ids + ([self.eos_token_id] if self.add_eos_token else [])
        return ids

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return self.backend.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def decode_stream(self, prompt_ids: Sequence[int] = (), skip_special_tokens: bool = True
                      ) -> DecodeStream:
        return DecodeStream(self, prompt_ids, skip_special_tokens=skip_special_tokens)

    # ------------------------------------------------------------------ chat

    def apply_chat_template(
        self,
        messages: Sequence[Any],
        add_generation_prompt: bool = True,
        tokenize: bool = True,
        tools: list[dict] | None = None,
        **kwargs: Any,
    ) -> list[int] | str:
        """Render ``messages`` with the model's chat template (jinja2 sandbox, as transformers).

        Returns token ids (encoded without adding special tokens: the template writes them) or,
        with ``tokenize=False``, the rendered text.
        """
        template = self._select_template(tools)
        if not messages:
            raise ValueError("cannot apply the chat template to an empty conversation")
        chat = [_plain_message(m) for m in messages]
        try:
            text = _compile_template(template).render(
                messages=chat, tools=tools, documents=None,
                add_generation_prompt=add_generation_prompt, **{**self.special_tokens, **kwargs})
        except jinja2.TemplateError as exc:
            raise ValueError(f"chat template of {self.name} failed: {exc}") from exc
        return self.encode(text, add_special_tokens=False) if tokenize else text

    def _select_template(self, tools: list[dict] | None) -> str:
        template = self.chat_template
        if isinstance(template, dict):
            name = "tool_use" if tools and "tool_use" in template else "default"
            if name not in template:
                raise ValueError(f"{self.name} has chat templates {sorted(template)} but no 'default'")
            template = template[name]
        if not template:
            raise ValueError(
                f"{self.name} has no chat template (tokenizer_config.json 'chat_template' or "
                "chat_template.jinja); send a plain prompt instead of messages")
        return template


class DecodeStream:
    """Incremental detokenizer: feed token ids, get text deltas.

    A delta never ends inside a multi-byte UTF-8 character: while the decoded window ends in
    U+FFFD (an incomplete byte sequence) the text is held back until more tokens complete it
    (vLLM's prefix/read offsets). ``"".join(deltas) + flush()`` equals ``decode(all ids)``.
    """

    def __init__(self, tokenizer: Tokenizer, prompt_ids: Sequence[int] = (),
                 skip_special_tokens: bool = True) -> None:
        self.tokenizer = tokenizer
        self.skip_special_tokens = skip_special_tokens
        context = list(prompt_ids)[-_PROMPT_CONTEXT_TOKENS:]
        self._ids: list[int] = context  # window: ids[prefix:read] already emitted, ids[read:] pending
        self._prefix = 0
        self._read = len(context)
        self.text = ""

    def step(self, token_ids: int | Sequence[int]) -> str:
        """Add one or more token ids; return the newly complete text ('' while a char is split)."""
        self._ids.extend([token_ids] if isinstance(token_ids, int) else token_ids)
        prefix_text = self._decode(self._ids[self._prefix:self._read])
        new_text = self._decode(self._ids[self._prefix:])
        if len(new_text) <= len(prefix_text) or new_text.endswith("\ufffd"):
            return ""
        delta = new_text[len(prefix_text):]
        # slide the window: keep only the ids the next decode needs as context
        self._ids = self._ids[self._read:]
        self._prefix, self._read = 0, len(self._ids)
        self.text += delta
        return delta

    def flush(self) -> str:
        """Return whatever is held back (an incomplete character decodes as U+FFFD)."""
        prefix_text = self._decode(self._ids[self._prefix:self._read])
        new_text = self._decode(self._ids[self._prefix:])
        delta = new_text[len(prefix_text):]
        self._ids = []
        self._prefix = self._read = 0
        self.text += delta
        return delta

    def _decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=self.skip_special_tokens)


# ---------------------------------------------------------------------- helpers


def _read_json(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TokenizerError(f"{path} is not valid JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise TokenizerError(f"{path} must hold a JSON object, got {type(data).__name__}")
    return data


def _token_content(value: Any) -> str | None:
    if isinstance(value, dict):  # serialized AddedToken
        return value.get("content")
    return value if isinstance(value, str) else None


def _plain_message(message: Any) -> dict:
    if callable(getattr(message, "model_dump", None)):
        message = message.model_dump()
    if not isinstance(message, dict):
        raise TypeError(f"chat messages must be dicts with 'role' and 'content', got {message!r}")
    # like transformers: drop None values (OpenAI clients send content=None, tool_calls=None)
    return {key: value for key, value in message.items() if value is not None}


def _raise_exception(message: str) -> None:
    raise jinja2.exceptions.TemplateError(message)


def _tojson(x: Any, ensure_ascii: bool = False, indent: int | None = None,
            separators: tuple[str, str] | None = None, sort_keys: bool = False) -> str:
    # jinja's own tojson escapes HTML characters; chat templates expect plain JSON
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


class _GenerationTag(jinja2.ext.Extension):
    """``{% generation %}...{% endgeneration %}`` (transformers' assistant mask marker): render as is."""

    tags = {"generation"}

    def parse(self, parser: Any) -> jinja2.nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller: Any) -> str:
        return caller()


@lru_cache(maxsize=16)
def _compile_template(template: str) -> jinja2.Template:
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=["jinja2.ext.loopcontrols", _GenerationTag])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    try:
        return env.from_string(template)
    except jinja2.TemplateSyntaxError as exc:
        raise ValueError(f"chat template does not parse (line {exc.lineno}): {exc.message}") from exc
