"""An asyncio web service (Starlette on uvicorn) in front of loopruntime sessions.

``app.py`` is the service, ``agents.py`` the loops a host process runs beside
it.  How to run both: ``docs/clients.md`` ("A web service").
"""
