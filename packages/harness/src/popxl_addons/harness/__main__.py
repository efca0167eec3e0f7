"""`python -m popxl_addons.harness`."""

from popxl_addons.harness.cli import main

raise SystemExit(main())
