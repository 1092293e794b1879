"""The names ``session.replay`` exports: callers import them from the package,
whichever of its modules holds them."""

from __future__ import annotations

import session.replay

REPLAY = {
    "RULES", "TREE_SCHEMA", "TREE_VERSION", "CheckReport", "Epoch", "GateNode", "InputNode",
    "ModelStep", "NoticeNode", "ProgressNode", "Problem", "Relation", "ReplayInputError", "Run",
    "Stats", "Stream", "Talk", "ToolStep", "TranscriptRenderer", "Tree", "TreeFold", "WriterNode",
    "build_tree", "check", "check_records", "open_for_replay", "read_session", "render_states",
    "render_transcript", "render_tree", "replay_command", "states_at", "tree_json",
    "tree_json_schema",
    "UNIFIED_SCHEMA", "UNIFIED_VERSION", "build_unified", "unified_json", "unified_json_schema",
}  # fmt: skip


def test_replay_exports_its_names() -> None:
    assert set(session.replay.__all__) == REPLAY
    for name in REPLAY:
        assert getattr(session.replay, name) is not None
    # The package's `check` is the checker function, not its module.
    assert callable(session.replay.check)
