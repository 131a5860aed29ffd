"""What arrives: EventBridge envelopes and the events in them, read tolerantly (docs/ecs-events.md).

- envelope.py    an SQS message body read into an EventBridge envelope, whatever the body holds; the ranges a
                 time or a number must fall in
- ecs.py         pydantic models of the ECS health, state and task events; schema drift counted
- cloudwatch.py  the "CloudWatch Alarm State Change" and "CloudWatch Alarm Contributor State Change" events (the
                 stack's own alarms, and each time series of one)
- parse.py       an envelope into the model its detail-type names
- xid.py         the NVIDIA XID catalog as ECS uses it

May import core only.
"""
