"""Wrong acceptance rules for sampled drafts that no alternative of the judge was built to model.

bugs.py's sampled-draft bugs each have their own law among the judge's alternatives
(tests/server/law_sampled.py). These three were chosen the other way round: rules a reviewer
might write by mistake, planted to show that the judge's omnibus part (tests/server/law_omnibus.py)
catches an acceptance rule whatever its form, the residual right in all three. Each is an edit of
one file, planted as bugs.py's are (plant.py); tests/test_sampled_draft_bugs.py checks that every
edit still finds its text. docs/reliability.md has which test catches each, on a real server.
"""

from __future__ import annotations

from .bugs import ACCEPT_TRITON, Q_DRAFT, SAMPLED_VERIFY, Bug, Edit

SAMPLED_ACCEPT = "accepted_prefix_length(uniform * proposal.q_draft < p_draft)"

SAMPLED_DRAFT_BUGS = {
    "sampled_accept_p_ignoring_q": Bug(
        SAMPLED_VERIFY,
        SAMPLED_ACCEPT,
        "accepted_prefix_length(uniform < p_draft)",
        "sampled drafts kept with probability p(d), q ignored (the point-draft rule)",
        "sampled chain",
        twins=(Edit(ACCEPT_TRITON, Q_DRAFT, "            u = u  # q ignored\n"),),
    ),
    "sampled_accept_ratio_squared": Bug(
        SAMPLED_VERIFY,
        SAMPLED_ACCEPT,
        "accepted_prefix_length(uniform * proposal.q_draft.square() < p_draft.square())",
        "sampled drafts kept with probability min(1, (p/q)^2)",
        "sampled chain",
        twins=(
            Edit(
                ACCEPT_TRITON,
                Q_DRAFT,
                Q_DRAFT.replace("u = u * ", "q_d = ")
                + "            u = u * q_d * q_d\n            p = p * p\n",
            ),
        ),
    ),
    "sampled_accept_ratio_inverted": Bug(
        SAMPLED_VERIFY,
        SAMPLED_ACCEPT,
        "accepted_prefix_length(uniform * p_draft < proposal.q_draft)",
        "sampled drafts kept with probability min(1, q/p), the ratio upside down",
        "sampled chain",
        twins=(
            Edit(
                ACCEPT_TRITON,
                Q_DRAFT,
                Q_DRAFT.replace("u = u * ", "q_d = ") + "            u = u * p\n            p = q_d\n",
            ),
        ),
    ),
}
