"""The operator's web dashboard, under `/admin/` on the gateway's HTTP server (or on its
own: `hermes dashboard`): status, people and pairing, memory with provenance and undo,
sessions, reminders, logs. Server-rendered HTML (Jinja2), no script at all; secure by
default (`site.py` lists the checks every request passes, `auth.py` how people log in)."""
