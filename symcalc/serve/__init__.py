"""``symcalc serve``: a local page with instant answers, and a JSON API (``POST /api/solve``,
``POST /api/plan``) that answers with what ``symcalc solve|plan ... --json`` prints.

:mod:`symcalc.serve.worker` answers each request in a worker process killed at the time limit;
:mod:`symcalc.serve.app` is the Starlette app and its page (``static/``). Starlette and uvicorn
are dependencies of symcalc, loaded only by this package; MathJax's files are the ``serve``
extra's (``pip install "symcalc[serve]"``), without which derivations show as text.
"""
