"""The configuration writers: what the agent reads and writes beside containerd.

- ``merge`` (with ``merge_decision`` and ``merge_splice``) and ``toml_text``: the plan's
  handlers merged into config.toml, owned tables only, byte-preserving;
- ``sandbox_image``: the pause image key of config.toml;
- ``containerd_lines``: what each containerd line honours (the one version matrix);
- ``files``: config.toml read and written the way containerd needs it (atomic, UTF-8);
- ``state``: what the agent remembers beside config.toml, changed in named steps.
"""
