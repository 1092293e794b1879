"""session: many loops on one journal — the runtime, restore, replay, the CLI."""

from .client import Client as Client
from .client import ClientClosedError as ClientClosedError
from .client import ClientError as ClientError
from .client import ClientForkedError as ClientForkedError
from .client import ClientNotOpenError as ClientNotOpenError
from .client import CommandRefusedError as CommandRefusedError
from .client import WaitTimeoutError as WaitTimeoutError
from .client import open_client as open_client
from .collector import collector_paused as collector_paused
from .collector import freeze_held as freeze_held
from .collector import thaw_held as thaw_held
from .errors import DefinitionDriftError as DefinitionDriftError
from .errors import EmptyInputError as EmptyInputError
from .errors import ForkError as ForkError
from .errors import InvalidContentError as InvalidContentError
from .errors import NoResultError as NoResultError
from .errors import SeqOutOfRangeError as SeqOutOfRangeError
from .errors import SessionExistsError as SessionExistsError
from .errors import SessionLagError as SessionLagError
from .errors import UnknownSessionError as UnknownSessionError
from .errors import VerifyError as VerifyError
from .host import Host as Host
from .host import HostStatistics as HostStatistics
from .metrics import HostMetrics as HostMetrics
from .metrics import open_host_metrics as open_host_metrics
from .runtime import ROOT_LOOP as ROOT_LOOP
from .runtime import Session as Session
from .runtime import StreamDelta as StreamDelta
from .status import SessionStatus as SessionStatus
from .status import Status as Status
from .sync_client import SyncClient as SyncClient
from .sync_client import open_sync_client as open_sync_client
from .writer import CommitStatistics as CommitStatistics

__all__ = [
    "ROOT_LOOP",
    "DefinitionDriftError",
    "Client",
    "ClientClosedError",
    "ClientError",
    "ClientForkedError",
    "ClientNotOpenError",
    "CommandRefusedError",
    "CommitStatistics",
    "Host",
    "HostMetrics",
    "HostStatistics",
    "ForkError",
    "EmptyInputError",
    "InvalidContentError",
    "NoResultError",
    "SeqOutOfRangeError",
    "Session",
    "SessionExistsError",
    "SessionLagError",
    "SessionStatus",
    "Status",
    "StreamDelta",
    "SyncClient",
    "UnknownSessionError",
    "VerifyError",
    "WaitTimeoutError",
    "collector_paused",
    "freeze_held",
    "open_client",
    "open_host_metrics",
    "open_sync_client",
    "thaw_held",
]
