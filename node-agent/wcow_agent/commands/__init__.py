"""The commands of ``wcow-agent`` (``cli.py``), one module each, and the options they share."""
