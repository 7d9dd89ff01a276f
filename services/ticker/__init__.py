"""The ticker: owns schedules partitions and fires their due occurrences in fenced transactions."""
