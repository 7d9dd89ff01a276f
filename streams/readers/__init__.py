"""The topics read back: the compacted ones as tables (schedules as their tickers hold them,
calendars, teams) and every topic as history, for replay and audit.
"""
