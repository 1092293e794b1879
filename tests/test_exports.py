"""The public surface: tests outside this repository import these names."""

from __future__ import annotations

import importlib

import pytest

PUBLIC = {
    "journal": {
        "open_journal", "Journal", "Record", "Draft", "Event", "SessionLease", "SessionInfo",
        "JournalError", "ConflictError", "FencedError", "DuplicateEventError", "InvalidEventError",
        "SessionNotFoundError", "JournalSchemaError", "JournalCorruptError",
        "JournalClosedError", "JournalReadOnlyError", "JournalUnavailableError", "NotAJournalError",
        "SCHEMA_VERSION", "codec", "content", "events", "encode_event", "decode_event",
        "ForwardingJournal", "JournalLocation", "parse_location", "init_journal",
        "check_existing_journal", "make_journal_directory", "StorageCheck", "StorageProblem",
        "inbox", "LeaseHeldError", "InboxError", "InboxKeyError", "InboxConsumedError",
        "InboxEntryTooLargeError",
        "BlockingJournal", "open_blocking",
        "HostIdInUseError", "HostInfo", "DEFAULT_BLOB_THRESHOLD", "WriterSpan",
        "InboxUnavailableError", "READ_RETRIES", "RetryPolicy", "RetryingBlocking",
        "RetryingJournal", "Checkpointed", "TAIL_LIMIT",
    },
    "journal.inbox": {
        "MAX_ENTRY_BYTES", "Answer", "CancelQueued", "ChangeMode", "Claim", "Compact", "Consumed",
        "Create", "Decide", "InboxCommand", "InboxEntry", "InboxOutcome", "Interrupt", "Pause",
        "Resolve", "Resume", "Steer", "Submit", "Wakeup", "command_name", "decode_command",
        "decode_entry", "decode_outcome", "encode_command", "encode_outcome", "entry_limit",
        "wakeup_of", "wakeup_payload",
    },
    "loopruntime": {
        "LoopDefinition", "Limits", "Mode", "Delegate", "tool", "Tool", "ToolContext",
        "ask_user", "ask_user_tool", "Loop", "LoopHost", "LoopState", "LoopStatus", "fold",
        "Model", "ModelRequest", "Compactor", "ModelCompactor", "TRUNCATED_NOTICE",
        "INTERRUPTED_NOTICE", "LoopError", "CommandError", "GateMismatchError",
        "InvalidAnswerError", "LoopClosedError", "ModeNotFoundError", "ModelError",
        "NotQueuedError", "NotUnknownEffectError", "OutsideToolCallError",
        "IdempotencyKeyError", "QueueFullError", "PayloadTooLargeError", "BudgetExhaustedError",
        "NotRegisteredError", "DefinitionError", "NameClashError", "ChildRejectedError",
        "LeaseLostError", "LoopStoppedError", "ProgressTooLargeError", "UnknownLoopError",
        "hook", "Hook", "AddContext", "StopTurn", "Deny", "Rewrite", "ReplaceResult",
        "BeforeModel", "BeforeTool", "AfterTool", "TurnEnd",
        "classifier", "Classifier", "PermissionRequest", "Review",
        "limit_working_loops", "Phase", "LifecycleError",
    },
    "loopruntime.host": {
        "AnswerGate", "CancelQueuedInput", "ChangeMode", "Compact", "DecideGate", "Interrupt",
        "Pause", "Resume",
        "Reply", "ResolveToolCall", "Shutdown", "Snapshot", "Steer", "SubagentResult",
        "UserInput", "Accumulator", "Delta", "FoldError", "GuardFailedError", "ToolInputError",
        "child_outcome", "copy_state", "find_definition", "image_bytes", "image_missing",
        "image_state", "merged", "new_id", "reply_cut_short", "settle_turn_events",
        "unanswered_tool_uses", "KEYS_KEPT", "MAX_KEY_LENGTH", "KeyUse", "check_key",
        "command_digest", "command_name", "repeat_of", "Command", "CommitOptions",
        "ChangeInference", "ReplaceTools", "change_text", "changes",
        "describe", "digest", "prompts_of", "restore_config", "server_of",
        "MAX_PRINCIPAL_LENGTH", "check_principal", "NO_LIST", "own_list",
        "OwnerCheck", "owning", "RunTimer", "Ticket", "tokens_spent",
    },
    "loopruntime.models": {
        "ScriptedModel", "Reply", "ToolCall", "AnthropicModel", "OpenAIModel",
        "MissingExtraError", "RecordingError", "RecordingMismatchError",
        "RecordingModel", "ReplayModel", "request_digest",
        "RateLimit", "RateLimitError", "RateLimiter", "LimiterStatistics", "Waiting",
        "limiters", "use_default_rate_limit", "waiting_of",
    },
    "loopruntime.models.openai": {
        "OpenAIModel", "DEFAULT_CONTEXT_WINDOW", "STOP_REASONS", "ChunkTranslator",
        "MaxTokensField", "api_messages", "request_params",
    },
    "loopruntime.toolsets": {
        "McpServer", "Stdio", "Http", "McpTool", "McpServerError", "McpToolError", "Toolsets",
        "check_toolsets",
    },
    "session": {
        "Session", "ROOT_LOOP", "StreamDelta", "SessionExistsError", "SessionLagError",
        "UnknownSessionError", "VerifyError", "InvalidContentError", "SeqOutOfRangeError",
        "EmptyInputError", "ForkError", "NoResultError", "DefinitionDriftError",
        "Client", "CommandRefusedError", "Host", "HostStatistics", "open_client",
        "HostMetrics", "open_host_metrics",
        "ClientError", "ClientClosedError", "ClientNotOpenError", "WaitTimeoutError",
        "ClientForkedError",
        "SyncClient", "open_sync_client",
        "SessionStatus", "Status",
        "CommitStatistics", "CommitLatency", "commit_latency",
        "collector_paused", "freeze_held", "thaw_held",
    },
    "session.console": {"parse_bind", "serve_console"},
    "session.hosting.metrics": {
        "DURATION_BUCKETS", "HostMetrics", "RecordTally", "open_host_metrics",
    },
    "session.hosting.metrics_endpoint": {
        "bind_metrics", "metrics_address", "serve_metrics", "serving_metrics",
    },
}  # fmt: skip


@pytest.mark.parametrize("module", sorted(PUBLIC))
def test_public_names_are_exported(module: str) -> None:
    mod = importlib.import_module(module)
    assert set(mod.__all__) == PUBLIC[module]
    for name in mod.__all__:
        assert getattr(mod, name) is not None


def test_session_methods_of_the_design() -> None:
    from session import Session

    for method in (
        "create", "restore", "submit", "steer", "cancel_queued", "interrupt", "answer",
        "decide", "resolve", "compact", "change_mode", "snapshot", "verify", "subscribe",
        "wait_idle", "shutdown", "collaborate", "resume_collaboration",
        "collaboration_status", "fork", "result",
        "change_inference", "replace_tools", "pause", "resume",
    ):  # fmt: skip
        assert callable(getattr(Session, method))


def test_layers_only_look_down() -> None:
    import pathlib
    import re

    root = pathlib.Path(__file__).resolve().parents[1]
    upward = {"journal": ("loopruntime", "session"), "loopruntime": ("session",)}
    for package, forbidden in upward.items():
        for path in (root / package).rglob("*.py"):
            for line in path.read_text().splitlines():
                match = re.match(r"\s*(?:from|import)\s+(\w+)", line)
                assert not (match and match.group(1) in forbidden), f"{path}: {line.strip()}"
