"""The Step Functions workflows' sources, and the generator of their ASL JSON (statemachines/README.md)."""
