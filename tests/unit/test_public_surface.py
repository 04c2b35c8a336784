import importlib

import pytest

import core


@pytest.mark.parametrize("name", core.__all__)
def test_every_public_name_resolves_to_its_module(name):
    value = getattr(core, name)
    assert value is getattr(importlib.import_module(core._EXPORTS[name]), name)


def test_unknown_name_is_an_attribute_error():
    with pytest.raises(AttributeError, match="nope"):
        core.nope  # noqa: B018
