"""Tests of the project as users get it: built distributions, the docs' code and the notebook."""
