"""session: many loops on one journal — the runtime, restore, replay, the CLI."""

from .clients.client import Client as Client
from .clients.client import ClientClosedError as ClientClosedError
from .clients.client import ClientError as ClientError
from .clients.client import ClientForkedError as ClientForkedError
from .clients.client import ClientNotOpenError as ClientNotOpenError
from .clients.client import CommandRefusedError as CommandRefusedError
from .clients.client import WaitTimeoutError as WaitTimeoutError
from .clients.client import open_client as open_client
from .clients.sync_client import SyncClient as SyncClient
from .clients.sync_client import open_sync_client as open_sync_client
from .embedded.collector import collector_paused as collector_paused
from .embedded.collector import freeze_held as freeze_held
from .embedded.collector import thaw_held as thaw_held
from .embedded.commit_latency import CommitLatency as CommitLatency
from .embedded.commit_latency import commit_latency as commit_latency
from .embedded.errors import DefinitionDriftError as DefinitionDriftError
from .embedded.errors import EmptyInputError as EmptyInputError
from .embedded.errors import ForkError as ForkError
from .embedded.errors import InvalidContentError as InvalidContentError
from .embedded.errors import NoResultError as NoResultError
from .embedded.errors import SeqOutOfRangeError as SeqOutOfRangeError
from .embedded.errors import SessionExistsError as SessionExistsError
from .embedded.errors import SessionLagError as SessionLagError
from .embedded.errors import UnknownSessionError as UnknownSessionError
from .embedded.errors import VerifyError as VerifyError
from .embedded.runtime import ROOT_LOOP as ROOT_LOOP
from .embedded.runtime import Session as Session
from .embedded.runtime import StreamDelta as StreamDelta
from .embedded.status import SessionStatus as SessionStatus
from .embedded.status import Status as Status
from .embedded.writer import CommitStatistics as CommitStatistics
from .hosting.host import Host as Host
from .hosting.host import HostStatistics as HostStatistics
from .hosting.metrics import HostMetrics as HostMetrics
from .hosting.metrics import open_host_metrics as open_host_metrics

__all__ = [
    "ROOT_LOOP",
    "DefinitionDriftError",
    "Client",
    "ClientClosedError",
    "ClientError",
    "ClientForkedError",
    "ClientNotOpenError",
    "CommandRefusedError",
    "CommitLatency",
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
    "commit_latency",
    "freeze_held",
    "open_client",
    "open_host_metrics",
    "open_sync_client",
    "thaw_held",
]
