"""A program using popxl-addons-harness: one case of a layer, checked serialised against not serialised."""

from popxl_addons.harness import Case, Layout, Outcome, check
from popxl_addons.layers import Scale


def outcomes() -> list[Outcome]:
    case = Case("scale", lambda layout: Scale(), (2, 2), steps=(2,), rows=(1,), io_modes=("io",))
    return [check(variant) for variant in case.variants()]


if __name__ == "__main__":
    results = outcomes()
    assert results and all(isinstance(r.variant.layout, Layout) for r in results)
    for r in results:
        assert r.verdict == "PASS", (r.verdict, r.error)
    print("harness ok", len(results))
