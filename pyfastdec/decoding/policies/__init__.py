"""Draft policies: how much drafting pays, decided per iteration from measured costs
(base.py: the shared protocol, cost table and acceptance estimator)."""
from .base import DraftPolicy, LengthPolicy, draft_candidates
from .draft_length import AdaptiveDraftLength, DraftLengthPolicy, FixedDraftLength
from .draft_or_plain import DraftOrPlain
from .source_draft_length import SourceDraftLength, resolve_policy

__all__ = ["AdaptiveDraftLength", "DraftLengthPolicy", "DraftOrPlain", "DraftPolicy", "FixedDraftLength",
           "LengthPolicy", "SourceDraftLength", "draft_candidates", "resolve_policy"]
