"""The parts the decode step calls (worker.py): its three phases, and each concern behind one
small call.

    drafting.py         the draft phase: the drafter forward, then the block the drafter's kind
                        makes of it (chosen once at startup)
    chain_drafts.py     a chain's drafts by the drafter's kind: plain (argmax or sampled), DFlash2's
                        selector, Domino's rollout; the chain block cut to the step's width
    tree_drafting.py    a tree's block: the tree of the step's width in nodes
    target_head.py      the target's embedding and LM head, as the draft phase reads them
    verifying.py        the verify phase: target forward, the acceptance rule chosen at startup
    plain_forward.py    a plain step's forward as SGLang's decode step, where it can stand in
    ragged.py           per-request verify lengths: one ragged target forward, each request
                        judged within its own length
    committing.py       the commit phase: publish, inject the committed features, the bonus token
    deferred_context.py plain steps' injections held until the drafter next reads the draft KV
    hybrid.py           Qwen3.5/3.6 targets: the recurrent-state commit after verify
    replay_choice.py    whether the verify keeps SGLang's ReplaySSM ring or a state per position
    recurrent_memory.py the operator's view: the recurrent memory a request holds, the slot limit
    draft_window.py     --speculative-draft-window-size: the drafter's KV in a ring of W + B
    tp_agreement.py     --tp-size: the draft TP scope; every rank commits rank 0's tokens
    request_outputs.py  what the scheduler reads besides tokens: logprobs, sampling masks
    step_record.py      testing: a JSON line a step of what reached the target (server tests)

May import: every folder below it (errors, environment, runtime/, sampling/, tree/, drafter/, width/) and
SGLang; never the worker, which imports it.
"""
