"""pytest plugin (``pytest11`` entry point ``hinge``): the kit's fixtures, nothing else.

Inert until used: it registers fixtures only and imports torch or hinge's internals lazily,
inside the fixtures that need them.
"""

from __future__ import annotations
