"""hinge's FlashAttention-4 attention backend (plugin ``fa4``): paged prefill and decode through
``flash_attn.cute`` (package flash-attn-4, in hinge-llm's ``gpu`` extra), imported only when the
backend is built."""

__version__ = "0.1.0"

#: the flash-attn-4 release this plugin is written and tested against (the API changes between
#: betas); pinned in hinge-llm's ``gpu`` extra
FLASH_ATTN_4_VERSION = "4.0.0b36"
