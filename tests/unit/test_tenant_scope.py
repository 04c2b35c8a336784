"""Which tenants' sessions and dead letters a credential sees in the console and
``/v1/sessions/inspect`` (issue 45): those of the OV keys it lists."""

from __future__ import annotations

from core.config import RpcCredential, Settings
from core.session import tenant_for_api_key
from workers.rpc.auth import visible_tenants


def test_a_credential_sees_the_tenants_of_its_ov_keys() -> None:
    settings = Settings(user_api_keys={"acme": "acme-key", "beta": "beta-key"})
    token = {"token": "t" * 16}
    cases = [
        (None, None),  # no credentials configured: every tenant
        ({}, None),  # a credential that may send any key: every tenant
        ({"ovKeys": ["acme-key"]}, frozenset({"acme"})),
        ({"ovKeys": ["acme-key", "beta-key"]}, frozenset({"acme", "beta"})),
        ({"ovKeys": ["acme-key"], "serviceKey": True}, frozenset({"acme", None})),  # and the service's own
        ({"ovKeys": ["other-key"]}, frozenset({tenant_for_api_key(settings, "other-key")})),
    ]
    for fields, seen in cases:
        credential = None if fields is None else RpcCredential.model_validate({**token, **fields})
        assert visible_tenants(settings, credential) == seen, fields
