"""popxl-addons' `popxl_addons.transforms.use_fc_pass`, re-exporting this project's (`popxl_addons.core.fc_pass`).

The setting is recorded per matmul and has no effect here (see `popxl_addons.core.fc_pass`).
"""

from __future__ import annotations

from popxl_addons.core.fc_pass import disable_fc_pass, enable_fc_pass

__all__ = ["disable_fc_pass", "enable_fc_pass"]
