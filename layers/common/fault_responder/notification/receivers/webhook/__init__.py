"""The generic signed webhook: JSON in the shape of Alertmanager's webhook payload (version 4) for each incident
change, signed with HMAC-SHA256 over the time and the body (docs/webhook.md).

- payload.py  the payload of an incident, a fleet incident or a notice: pure, bounded (MAX_BODY_BYTES)
- signing.py  the signature headers, and their verification (replay window, two secrets during a rotation)
- target.py   the routing file's `webhook:` target, and which endpoint URLs are accepted

The sender (adapters/webhook.py) reads the endpoint's URL and signing secrets from Secrets Manager and posts
through adapters/http.py.
"""
