"""Jobs and the queues that carry them (SQLite by default, SQS in AWS).

Import from the modules (`nkibot.jobs.model`, `.factory`, `.queue`, `.state`): this package
re-exports nothing, so a module that reads `jobs.model` does not load the queue backends
(SQLite, SQS) with it. (Shape overrides live in `nkibot.config.targets`.)
"""
