"""The repository's build and check tools, run from nox and by the tests under tools/tests; no wheel ships them."""
