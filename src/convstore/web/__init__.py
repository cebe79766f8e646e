"""The read-only web surface: `convstore serve`, and the HTML that `export --format html` writes.

:mod:`convstore.views.html` is plain standard library (the export needs nothing else);
:mod:`convstore.web.app` needs the ``web`` extra (Starlette, uvicorn).
"""
