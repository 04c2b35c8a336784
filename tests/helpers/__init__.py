"""Shared test helpers, one module per tier: capture, rpc, e2e (+ e2e_fixtures), host, ov, fake_ov; waiting."""
