"""A key's own limits (KeyLimits: set below its tier's, never above) as the request path applies
them: worked out once when the key is loaded into a gateway's cache, like the tier's, so they
cost no extra Redis round trip. Each applies as the lower of the key's figure and the tier's at
load time; a change to either bumps the config epoch, so a tier lowered later wins within a second.

- **At once.** Admission counts a person's requests in a tier together (scheduling/units.py), and
  each demand states the cap of its unit. A key's request states the key's lower cap, so it starts
  only while its owner runs fewer than that in the tier. A person who uses only that key in the
  tier (the usual case: a key narrowed for one script) is held to it exactly; one who uses another
  key of the tier beside it is never held above the tier's cap, though while the other key's
  requests state the tier's cap, a waiting request of the narrowed key may start under it.
- **A minute.** The key's own GCRA limits, counted for the key alone, beside the tier's per-person
  and tier-wide ones (budget_rules.rate_limits): all are checked in admission's one call.
- **Models.** The key's own list restricts it as its tier's and its accounts' do (model_access.py).
"""

from __future__ import annotations

import dataclasses

from fairness.gateway.tier_policy import TierPolicy
from fairness.models import KeyLimits
from fairness.scheduling.limits import RateLimit


def narrowed(policy: TierPolicy, limits: KeyLimits) -> TierPolicy:
    """The tier's policy as it applies to the key: its cap at once the lower of the two."""
    cap = limits.max_concurrent
    if cap is None or cap >= policy.per_key_concurrency:
        return policy
    return dataclasses.replace(policy, per_key_concurrency=cap)


def own_rate_limits(key_id: int, limits: KeyLimits, policy: TierPolicy) -> tuple[RateLimit, ...]:
    """The key's own rate limits, where they are below every one of the tier's of the same kind
    (otherwise the tier's binds first and the key's would be checked for nothing)."""
    found = []
    rpm, tpm = limits.requests_per_minute, limits.tokens_per_minute
    if rpm and _below(rpm, policy.person_requests_per_minute, policy.requests_per_minute):
        found.append(RateLimit(f"k{key_id}|rpm", rpm, words=f"this key's {rpm:,} requests a minute"))
    if tpm and _below(tpm, policy.person_tokens_per_minute, policy.tokens_per_minute):
        found.append(RateLimit(f"k{key_id}|tpm", tpm, tokens=True, words=f"this key's {tpm:,} tokens a minute"))
    return tuple(found)


def _below(figure: int, *tier_figures: int) -> bool:
    return all(not tier or figure < tier for tier in tier_figures)  # 0: the tier sets none
