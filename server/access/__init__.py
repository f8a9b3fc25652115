"""Who may call what: agent keys and their quotas (``agent_keys``), and which envs and
kwargs each lane may make (``env_access``). The admin token's check is the HTTP face's
(``server.http``), shared with the cluster's router."""
