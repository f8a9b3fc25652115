"""rollgym.data: trajectories as data sets (``rollgym generate``, ``rollgym export``).

* ``generate``: sample episodes of any registered env, from a model dir or a server;
* ``sources``: read a server's archive (its data dir, or over HTTP);
* ``curate``: filter by validity and reward, deduplicate (``dedup``: exact, MinHash);
* ``rows``: the export schema (the OpenAI chat format is ``rollgym.contract.chat``);
* ``export``: write a Hugging Face dataset, Parquet and chat JSONL;
* ``commands``: the two CLI commands. See docs/data.md.
"""
