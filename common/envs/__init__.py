"""Environments: the vector-env contract and its three implementations, the game-env base, video.

* ``contract``: ``VecEnv`` (the contract every vector env keeps) and ``EnvWorkerError``;
* ``group``: ``EnvGroup``, several envs stepped in sequence with auto-reset (used by all three);
* ``inprocess``, ``subproc``, ``ray_actors``: the envs in this process, in worker processes,
  in Ray actors; ``workers``: how envs are spread over workers and how a worker process runs;
* ``pipeline``: ``Pipeline``, a policy stepping a vector env group by group;
* ``factory``: ``make_vec_env`` and ``vec_env_for_run``, the vector env of a run;
* ``game_env``: ``GameEnv``, the base of the games' envs; ``video``: mp4 recording.

None of them imports Paddle.
"""
