"""journal: the vocabulary of loopruntime (content, events, records) and its storage.

This layer knows rows and bytes, not loop semantics; it imports nothing from
``loopruntime`` or ``session``.
"""

from . import codec as codec
from . import content as content
from . import events as events
from . import inbox as inbox
from .backoff import READ_RETRIES as READ_RETRIES
from .backoff import RetryPolicy as RetryPolicy
from .blobs import DEFAULT_BLOB_THRESHOLD as DEFAULT_BLOB_THRESHOLD
from .blocking import BlockingJournal as BlockingJournal
from .blocking import open_blocking as open_blocking
from .codec import SCHEMA_VERSION as SCHEMA_VERSION
from .codec import decode_event as decode_event
from .codec import encode_event as encode_event
from .errors import ConflictError as ConflictError
from .errors import DuplicateEventError as DuplicateEventError
from .errors import FencedError as FencedError
from .errors import HostIdInUseError as HostIdInUseError
from .errors import InboxConsumedError as InboxConsumedError
from .errors import InboxEntryTooLargeError as InboxEntryTooLargeError
from .errors import InboxError as InboxError
from .errors import InboxKeyError as InboxKeyError
from .errors import InboxUnavailableError as InboxUnavailableError
from .errors import InvalidEventError as InvalidEventError
from .errors import JournalClosedError as JournalClosedError
from .errors import JournalCorruptError as JournalCorruptError
from .errors import JournalError as JournalError
from .errors import JournalReadOnlyError as JournalReadOnlyError
from .errors import JournalSchemaError as JournalSchemaError
from .errors import JournalUnavailableError as JournalUnavailableError
from .errors import LeaseHeldError as LeaseHeldError
from .errors import NotAJournalError as NotAJournalError
from .errors import SessionNotFoundError as SessionNotFoundError
from .events import Event as Event
from .forwarding import ForwardingJournal as ForwardingJournal
from .location import JournalLocation as JournalLocation
from .location import parse_location as parse_location
from .opening import check_existing_journal as check_existing_journal
from .opening import init_journal as init_journal
from .opening import make_journal_directory as make_journal_directory
from .opening import open_journal as open_journal
from .record import Draft as Draft
from .record import Record as Record
from .retry import RetryingBlocking as RetryingBlocking
from .retry import RetryingJournal as RetryingJournal
from .store import TAIL_LIMIT as TAIL_LIMIT
from .store import Checkpointed as Checkpointed
from .store import HostInfo as HostInfo
from .store import Journal as Journal
from .store import SessionInfo as SessionInfo
from .store import SessionLease as SessionLease
from .store import StorageCheck as StorageCheck
from .store import StorageProblem as StorageProblem
from .store import WriterSpan as WriterSpan

__all__ = [
    "DEFAULT_BLOB_THRESHOLD",
    "READ_RETRIES",
    "SCHEMA_VERSION",
    "TAIL_LIMIT",
    "BlockingJournal",
    "Checkpointed",
    "ConflictError",
    "Draft",
    "DuplicateEventError",
    "Event",
    "FencedError",
    "ForwardingJournal",
    "InboxConsumedError",
    "InboxEntryTooLargeError",
    "InboxError",
    "InboxKeyError",
    "InboxUnavailableError",
    "InvalidEventError",
    "Journal",
    "JournalClosedError",
    "JournalCorruptError",
    "JournalError",
    "JournalReadOnlyError",
    "JournalLocation",
    "JournalSchemaError",
    "JournalUnavailableError",
    "HostIdInUseError",
    "HostInfo",
    "LeaseHeldError",
    "NotAJournalError",
    "Record",
    "RetryPolicy",
    "RetryingBlocking",
    "RetryingJournal",
    "SessionInfo",
    "SessionLease",
    "SessionNotFoundError",
    "StorageCheck",
    "StorageProblem",
    "WriterSpan",
    "check_existing_journal",
    "codec",
    "content",
    "decode_event",
    "encode_event",
    "events",
    "inbox",
    "init_journal",
    "make_journal_directory",
    "open_blocking",
    "open_journal",
    "parse_location",
]
