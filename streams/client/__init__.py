"""The producer SDK's write side (`kairos.client` re-exports it): schedule and calendar changes
checked as their tickers would, signed, sent and acknowledged before returning.
"""
