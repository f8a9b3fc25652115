"""``rollgym tasks``: a folder of Harbor task directories made ready to train on.

- ``build``: each task's image, built offline on local images and cached by content
  (``rollgym tasks build DIR``);
- ``check``: each task in real boxes, its oracle earning 1 and a do-nothing agent 0
  (``rollgym tasks check DIR``);
- ``commands``: the two subcommands; ``errors``: this package's one error root.

The format, the env and the images' names live in ``rollgym.envs.harbor``; the pool of
boxes per image in ``rollgym.sandboxes.image_pool``.
"""
