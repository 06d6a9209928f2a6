"""gradflow's version, in a module of its own so that provenance records read it without
importing the package (no import cycle through ``gradflow/__init__.py``)."""

__version__ = "0.1.0"
