"""The generic signed webhook: JSON in the shape of Alertmanager's webhook payload (version 4) for each incident
change, signed with HMAC-SHA256 over the time and the body (docs/webhook.md).

- payload.py  the payload of an incident, a fleet incident or a notice: pure, bounded (MAX_BODY_BYTES)
- signing.py  the signature headers, and their verification (replay window, two secrets during a rotation)
- target.py   the routing file's `webhook:` target (its model is routing.router's), and which endpoint URLs are
              accepted
- plan.py     what a webhook receiver still needs to be told: one payload per incident change
- client.py   the endpoint's URL and signing secrets from the webhook secret, and a signed POST through the channels
- kind.py     WebhookKind (WEBHOOK): performing a step, the workflow's notices
"""

from fault_responder.notification.receivers.webhook.kind import WEBHOOK, WebhookKind

__all__ = ["WEBHOOK", "WebhookKind"]
