/**
 * The plugin's release: one number with the service's (pyproject.toml), checked by
 * tests/unit/test_versions.py. Sent with every RPC call (`X-Ovstream-Plugin`) so the
 * service can say which plugins talk to it and refuse one older than it supports.
 */
export const ENGINE_VERSION = "0.3.0";

/** The header that carries ENGINE_VERSION on every RPC call. */
export const PLUGIN_VERSION_HEADER = "x-ovstream-plugin";
