"""The `ascend-router` console script: one sub-command per module."""
