"""The JSON API (django-ninja) at ``/api/``: one router per resource, assembled in
``portal.api.urls``; bearer tokens and their scopes in ``auth``, the per-token limit in
``throttle``, the one refusal body in ``errors``. docs/architecture.md (api) says how it
answers."""
