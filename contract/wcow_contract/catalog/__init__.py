"""Facts about upstream that the API and both sides decide by, each module with its sources:

- ``windows_builds``: Windows Server builds, their names, and which run on which host;
- ``runhcs_options``: the runhcs shim's options, as containerd decodes them;
- ``hcs_annotations``: every pod annotation hcsshim reads, and the utility VM's defaults;
- ``annotation_patterns``: which allow-list globs an annotation key can match.

Standard library only: nothing here knows the profile model or the wire formats.
"""
