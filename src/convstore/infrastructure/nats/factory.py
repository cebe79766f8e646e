"""eventsourcing's persistence factory for ``nats://`` stores: SQLite's, for the replica,
with the recorder swapped for :class:`~convstore.infrastructure.nats.recorder.NatsRecorder` and a
link to the stream made from the ``NATS_*`` settings (see :func:`nats_env`)."""

from __future__ import annotations

from eventsourcing.persistence import ApplicationRecorder
from eventsourcing.sqlite import SQLiteFactory

from convstore.infrastructure.common.mapper import PydanticMapper
from convstore.infrastructure.nats.link import JetStreamLink
from convstore.infrastructure.nats.location import NatsLocation
from convstore.infrastructure.nats.recorder import FOLLOW_LOCK_SUFFIX, NatsRecorder
from convstore.infrastructure.sqlite.recorder import file_uri, lock_timeout_seconds


def nats_env(location: NatsLocation, identity: str) -> dict[str, str]:
    """The eventsourcing settings of a ``nats://`` store whose stream has ``identity``."""
    return {
        "PERSISTENCE_MODULE": f"{__name__}:NatsFactory",
        "SQLITE_DBNAME": file_uri(location.replica),
        "SQLITE_LOCK_TIMEOUT": str(lock_timeout_seconds()),
        "NATS_SERVERS": ",".join(location.servers),
        "NATS_STREAMS": ",".join(location.streams),
        "NATS_USER": location.user,
        "NATS_PASSWORD": location.password,
        "NATS_TIMEOUT": str(location.timeout),
        "NATS_IDENTITY": identity,
        "NATS_FOLLOW_LOCK": f"{location.replica}{FOLLOW_LOCK_SUFFIX}",
    }


class NatsFactory(SQLiteFactory):
    """SQLite's factory for the replica; the application recorder writes to the stream."""

    def application_recorder(self) -> ApplicationRecorder:
        links: list[JetStreamLink] = []
        try:
            for stream in self.env.get("NATS_STREAMS", "").split(","):
                link = JetStreamLink(
                    self.env.get("NATS_SERVERS", "").split(","),
                    stream,
                    user=self.env.get("NATS_USER", ""),
                    password=self.env.get("NATS_PASSWORD", ""),
                    timeout=float(self.env.get("NATS_TIMEOUT", "20")),
                    via=links[0] if links else None,  # the partitions share one connection
                )
                links.append(link)  # one at a time: a failed connect closes those made
            cipher = self.cipher()
            mapper = PydanticMapper(self.transcoder(), self.compressor(), cipher)
            recorder = NatsRecorder(
                self.datastore,
                links,
                mapper.decode_state,
                previews=cipher is None,
                identity=self.env.get("NATS_IDENTITY", ""),
                follow_lock=self.env.get("NATS_FOLLOW_LOCK", ""),
            )
            recorder.create_table()
        except BaseException:
            for link in links:
                link.close()
            raise
        return recorder
