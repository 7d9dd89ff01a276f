"""The reliability suite (`python -m bench.reliability`): Kairos's promise through failures."""
