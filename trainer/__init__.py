"""The trainer: pulls versioned trajectories from the server, trains with TRL, pushes weights."""
