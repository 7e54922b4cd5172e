"""Entry points of the ``rescue`` command: thin Hydra apps over the library."""
