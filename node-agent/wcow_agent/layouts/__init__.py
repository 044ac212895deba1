"""Where each node keeps containerd's configuration: the distributions' presets, what
``--distribution auto`` reads on the node to find it, and the flags over both. Produces the
``NodeLayout`` (``config/layout.py``) the configuration writers and the host adapter use."""
