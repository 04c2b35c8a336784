"""The web console (``/console``): the deployment at a glance and a session inspector.

Server-rendered HTML (Jinja2 templates, an inline SVG chart), no script and no build step.
Behind the RPC's credentials (a login form puts the token in a cookie); read-only unless the
credential may act (``workers.rpc.auth.may_act``): then dead letters can be replayed.
``routes`` serves it, ``views`` reads what each page shows, ``chart`` draws the lag chart.
"""
