"""hinge-plugin-template: an attention backend registered from outside hinge.

Nothing is imported here: hinge loads ``hinge_template.plugin`` through the entry point, and the
backend module (which imports torch) only when the backend is built.
"""

__version__ = "0.1.0"
