"""Bugs of a draft tree's verify and commit through the ReplaySSM ring (tree/replay_ring.py,
cpu/gated_deltanet/tree_replay.py), each an edit of one file, planted as bugs.py's are (plant.py).

Each keeps the server running and its outputs plausible; only a test that compares a ring tree
server with the target alone (tests/server/test_hybrid_tree.py, the ring cases) can see them.
tests/test_tree_replay_bugs.py checks that every edit still finds its text and plants one on a
server in CI; docs/reliability.md has what catches each.
"""

from __future__ import annotations

from .bugs import Bug

TREE_REPLAY = "cpu/gated_deltanet/tree_replay.py"
REPLAY_RING = "tree/replay_ring.py"
HYBRID_COMMIT = "step/hybrid.py"

TREE_REPLAY_BUGS = {
    "tree_replay_reads_a_chain": Bug(
        TREE_REPLAY,
        "node_parents = torch.where(valid, parents[tokens].long(), -1)",
        "node_parents = torch.where(valid, steps - 1, -1)",
        "each node starts from the node before it, not its parent (SGLang's chain replay on a tree)",
        "hybrid ring tree",
    ),
    "tree_commit_without_moving_the_path": Bug(
        REPLAY_RING,
        "compact_accepted_path(rings, rows, write_pos, base, on_path, NULL_SLOT)",
        "pass",
        "the commit folds the first records of the window (nodes 0, 1, ...), not the accepted path's",
        "hybrid ring tree",
    ),
    "tree_conv_rolled_back_by_depth": Bug(
        HYBRID_COMMIT,
        "commit_tree_through_the_ring(self.target_worker, batch, accepted, path_rows, last, track)",
        "commit_tree_through_the_ring(self.target_worker, batch, accepted, path_rows, accepted - 1, track)",
        "the conv window rolled back to the accepted depth's node in the chain order, not the path's node",
        "hybrid ring tree",
    ),
    "tree_track_folded_to_the_node": Bug(
        HYBRID_COMMIT,
        "track = None if steps_to_track is None else (depth_to_track, steps_to_track)",
        "track = None if steps_to_track is None else (steps_to_track, steps_to_track)",
        "the track slot's state folded through the tracked node's index, not its depth on the path",
        "hybrid ring tree",
    ),
}
