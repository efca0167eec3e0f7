# Generated from the table in popxl_addons/_paths.py by `python -m tools.shells`; do not edit.
"""popxl-addons' `popxl_addons.transforms.use_fc_pass`: the setting is recorded per matmul and has no effect here."""

from popxl_addons.core.transforms.fc_pass import disable_fc_pass, enable_fc_pass

__all__ = ["disable_fc_pass", "enable_fc_pass"]
