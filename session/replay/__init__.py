"""Replay: read a session's journal, never write it.

The projections (transcript, tree, states, checker) are pure functions over
records: no I/O, no clock, the same answer for a journal read from any
backend.  Only ``command`` opens a journal.  docs/replay.md describes the
output formats, the tree and every rule of the checker.
"""

from ..embedded.check.checker import check as check
from ..embedded.check.checker import check_records as check_records
from ..embedded.check.report import RULES as RULES
from ..embedded.check.report import CheckReport as CheckReport
from ..embedded.check.report import Problem as Problem
from .command import ReplayInputError as ReplayInputError
from .command import open_for_replay as open_for_replay
from .command import read_session as read_session
from .command import replay_command as replay_command
from .states import render_states as render_states
from .states import states_at as states_at
from .transcript import TranscriptRenderer as TranscriptRenderer
from .transcript import render_transcript as render_transcript
from .tree import TREE_SCHEMA as TREE_SCHEMA
from .tree import TREE_VERSION as TREE_VERSION
from .tree import Epoch as Epoch
from .tree import GateNode as GateNode
from .tree import InputNode as InputNode
from .tree import ModelStep as ModelStep
from .tree import NoticeNode as NoticeNode
from .tree import ProgressNode as ProgressNode
from .tree import Relation as Relation
from .tree import Run as Run
from .tree import Stats as Stats
from .tree import Stream as Stream
from .tree import Talk as Talk
from .tree import ToolStep as ToolStep
from .tree import Tree as Tree
from .tree import WriterNode as WriterNode
from .tree import render_tree as render_tree
from .tree import tree_json as tree_json
from .tree import tree_json_schema as tree_json_schema
from .tree_builder import TreeFold as TreeFold
from .tree_builder import build_tree as build_tree
from .unified import UNIFIED_SCHEMA as UNIFIED_SCHEMA
from .unified import UNIFIED_VERSION as UNIFIED_VERSION
from .unified import unified_json as unified_json
from .unified import unified_json_schema as unified_json_schema
from .unified_builder import build_unified as build_unified

__all__ = [
    "RULES",
    "TREE_SCHEMA",
    "TREE_VERSION",
    "UNIFIED_SCHEMA",
    "UNIFIED_VERSION",
    "CheckReport",
    "Epoch",
    "GateNode",
    "ProgressNode",
    "InputNode",
    "ModelStep",
    "NoticeNode",
    "Problem",
    "Relation",
    "ReplayInputError",
    "Run",
    "Stats",
    "Stream",
    "Talk",
    "ToolStep",
    "TranscriptRenderer",
    "Tree",
    "TreeFold",
    "WriterNode",
    "build_tree",
    "build_unified",
    "check",
    "check_records",
    "open_for_replay",
    "read_session",
    "render_states",
    "render_transcript",
    "render_tree",
    "replay_command",
    "states_at",
    "tree_json",
    "tree_json_schema",
    "unified_json",
    "unified_json_schema",
]
