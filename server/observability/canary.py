"""The served-weights canary's server side (``rollgym.contract.canary``): after an update,
score the push's probes under the weights now served and compare with the trainer's."""

from __future__ import annotations

import logging

from prometheus_client import Gauge

from rollgym.contract.canary import CanaryProbes, CanaryResult, logprob_mismatch
from rollgym.engine.base import ServingEngine

logger = logging.getLogger(__name__)


async def check_served_weights(
    engine: ServingEngine, probes: CanaryProbes, gauge: Gauge
) -> CanaryResult:
    """Score ``probes`` on ``engine``, set ``gauge`` to the mismatch, log a mismatch beyond
    the tolerance as an alarm line, and return the verdict."""
    version = engine.policy_version
    served = [await engine.score(probe.token_ids) for probe in probes.probes]
    mismatch = logprob_mismatch([probe.logprobs for probe in probes.probes], served)
    gauge.set(mismatch)
    passed = mismatch <= probes.tolerance
    if not passed:
        logger.warning(
            "SERVED WEIGHTS MISMATCH at version %d: the served logprobs of the update's probes "
            "differ from the trainer's by up to %.4g (tolerance %.4g): the server does not "
            "serve the weights the trainer pushed",
            version,
            mismatch,
            probes.tolerance,
        )
    return CanaryResult(
        policy_version=version, mismatch=mismatch, tolerance=probes.tolerance, passed=passed
    )
