"""The eight agent tools behind ``POST /v1/tools/{name}``."""
