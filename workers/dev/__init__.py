"""Development tooling: the in-memory OV, the scripted model server, local OV/Redis
launchers, the demo and the one-process ``ovstream up``. No production module imports it."""
