"""A synchronous link to one JetStream stream: nats-py's asyncio client on a private event
loop thread, called from any thread.

eventsourcing's recorders are synchronous, so every call here submits a coroutine to the
link's own loop (:func:`asyncio.run_coroutine_threadsafe`) and waits for its result; except a
publish, which the calling thread makes itself on a second connection when it can
(:class:`_Direct`): handing it to the loop's thread and back cost a third of its client CPU.
The link publishes (one message, or an atomic batch of several), reads the stream's newest
sequence, purges a subject, and, in the process that follows the stream for its replica, keeps
one ordered consumer that delivers every message of the stream, in stream order, into a buffer the
recorder drains (:meth:`JetStreamLink.take`, :meth:`JetStreamLink.take_ready`).

Imported only for ``nats://`` stores: it needs the ``nats`` extra (nats-py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar
from uuid import uuid4

import nats
from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import ConsumerConfig, DeliverPolicy, StreamConfig
from nats.js.errors import NotFoundError

T = TypeVar("T")

BATCH_LIMIT = 1000
"""The most messages one atomic batch may hold (the server's limit)."""

WRONG_LAST_SEQUENCE = (10071, 10164)
"""The error codes of a publish refused by its ``Nats-Expected-Last-Subject-Sequence``: a
single message's, an atomic batch's."""

DUPLICATE_IN_BATCH = 10201
"""The error code of an atomic batch holding a message id the stream has already stored:
the same batch, retried after its acknowledgement was lost, landed the first time."""

BATCH_ID_HEADER = "Nats-Batch-Id"
BATCH_COMMIT_HEADER = "Nats-Batch-Commit"
"""An atomic batch's headers, kept on its stored messages: every message of a batch carries
the first, its last the second."""

MESSAGE_NOT_FOUND = 10057
"""The error code of a message delete whose message is already gone."""

ERASE_AT_ONCE = 200
"""How many message deletes an erasure has in flight at once."""

ATTEMPT_SECONDS = 2.0
"""How long one try of a request waits for its answer. A request sent to a server that died
is never answered (the client reconnects to another, the request is lost), so each try is
short and tries repeat until the link's timeout: a leader election costs a few tries."""

HEARTBEAT_SECONDS = 1.0
"""The ordered consumer's idle heartbeat: how soon the client notices it lost its consumer."""

INACTIVE_SECONDS = 5.0
"""How long the servers keep an ordered consumer nobody listens to any more (its link closed
or stopped following, its process killed) before they delete it."""

STALL_SECONDS = 2.0
"""How long :meth:`JetStreamLink.take` waits for a due message before it starts a new
consumer where the old one stopped."""

DIRECT_IDLE_SECONDS = 60.0
"""A publishing connection unused this long is closed and made again at its next publish:
its loop runs only while a thread publishes, so it answers no server PING between publishes,
and the servers drop a client that misses two (two minutes apart by default)."""

HEADER_ROOM = 512
"""Bytes kept for a message's headers beside its topic (convstore's, the message id, the
expected sequence, the writer's chain and an atomic batch's own), counted with its payload
against the servers' ``max_payload``."""

_RETRY_PAUSE_SECONDS = 0.1


class Refused(Exception):
    """The server refused a publish or a request (its JetStream error)."""

    def __init__(self, err_code: int, description: str) -> None:
        super().__init__(f"{description} (err_code {err_code})")
        self.err_code = err_code


class Unavailable(Exception):
    """The stream did not answer within the link's timeout (no leader, no server)."""


class Closed(Unavailable):
    """The link was closed."""


@dataclass(frozen=True, slots=True)
class Outgoing:
    """One message to publish: its subject, headers and payload."""

    subject: str
    headers: dict[str, str]
    data: bytes


@dataclass(frozen=True, slots=True)
class Delivered:
    """One stored message, as the ordered consumer delivered it; or, with ``deleted_from``,
    no message: sequences ``deleted_from`` to ``seq`` the stream no longer holds (see
    :meth:`JetStreamLink.take`)."""

    seq: int
    subject: str
    headers: dict[str, str]
    data: bytes
    deleted_from: int = 0


class _Direct:
    """A second connection to the cluster for publishing, driven by the thread that publishes
    (``run_until_complete`` on a loop of its own), one thread at a time: a publish so skips two
    hand-overs between threads. A thread that finds it taken by another, or that runs an event
    loop itself, gets ``None`` and publishes through the link's loop thread instead.
    Made at the first publish, and again after :data:`DIRECT_IDLE_SECONDS` unused."""

    def __init__(self, connect: Callable[[], Coroutine[Any, Any, Client]]) -> None:
        self._connect = connect
        self._loop = asyncio.new_event_loop()
        self._lock = threading.Lock()
        self._nc: Client | None = None
        self._used = 0.0
        self._closed = False

    def run(self, make: Callable[[Client], Coroutine[Any, Any, T]], timeout: float) -> T | None:
        """``make(client)`` run to its end in this thread; ``None`` when this thread cannot."""
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            pass
        else:
            return None  # a loop runs in this thread: it cannot run another
        if not self._lock.acquire(blocking=False):
            return None
        try:
            if self._closed:
                return None
            now = time.monotonic()
            if self._nc is not None and now - self._used > DIRECT_IDLE_SECONDS:
                self._drop()
            if self._nc is None:
                self._nc = self._loop.run_until_complete(asyncio.wait_for(self._connect(), timeout))
            self._used = now
            return self._loop.run_until_complete(make(self._nc))
        finally:
            self._lock.release()

    def close(self) -> None:
        """Close the connection and the loop; a later :meth:`run` gives ``None``."""
        with self._lock:
            self._closed = True
            self._drop()
            self._loop.close()

    def _drop(self) -> None:
        """Close the connection (the caller holds ``_lock``) and cancel what it left."""
        nc, self._nc = self._nc, None
        if nc is None:
            return

        async def close() -> None:
            with contextlib.suppress(Exception):  # a connection already gone is as good
                await asyncio.wait_for(nc.close(), 2.0)
            await _cancel_the_rest()

        with contextlib.suppress(Exception):
            self._loop.run_until_complete(close())


class JetStreamLink:
    """One connection to a cluster, for one stream, used synchronously from any thread."""

    def __init__(
        self,
        servers: Sequence[str],
        stream: str,
        *,
        user: str = "",
        password: str = "",
        timeout: float = 20.0,
        via: JetStreamLink | None = None,
    ) -> None:
        """Connect to ``servers`` for ``stream``; or, given ``via``, use that link's
        connection (its client and event loop thread) for another stream of the same
        cluster: a partitioned store's links share one, so the messages of every partition
        arrive on one socket and one thread. The connection closes with the link that made
        it; closing a link made ``via`` another only ends its consumer."""
        self.stream = stream
        self.timeout = timeout
        self._delivered: list[Delivered] = []
        self._highest = 0
        self._pending = 0
        self._released = False
        self._subscription: Any = None
        self._subjects = ""
        if via is not None:
            self._root: JetStreamLink = via._root
            self._loop: asyncio.AbstractEventLoop = via._loop
            self._thread: threading.Thread = via._thread
            self._nc: Client = via._nc
            self._js: JetStreamContext = via._js
            self._arrived: threading.Condition = via._arrived
            self._direct: _Direct = via._direct
            return
        self._root = self
        self._last_error = ""
        self._arrived = threading.Condition()
        """Notified when a message arrives (shared by the links of one connection)."""
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name=f"nats-{stream}", daemon=True
        )
        # Wait until the loop runs: a call made before is refused as if the link were closed
        # (seen when eight processes opened a store at once on two busy cores).
        running = threading.Event()
        self._loop.call_soon(running.set)
        self._thread.start()
        running.wait()

        def connect() -> Coroutine[Any, Any, Client]:
            return nats.connect(
                list(servers),
                user=user or None,
                password=password or None,
                connect_timeout=min(timeout, 5.0),
                allow_reconnect=True,
                max_reconnect_attempts=-1,
                reconnect_time_wait=0.2,
                error_cb=self._note_error,
            )

        try:
            self._nc = self._call(asyncio.wait_for(connect(), timeout), timeout)
        except BaseException:
            self._stop_loop()
            raise
        self._direct = _Direct(connect)
        self._js = self._nc.jetstream(timeout=timeout)

    @property
    def max_payload(self) -> int:
        """The most bytes one message may hold, headers included: the ``max_payload`` the
        server gave in its INFO when the client connected (1 MiB unless configured)."""
        return int(self._nc.max_payload)

    def oversized(self, payload: int, topic: str) -> bool:
        """Whether a message of ``payload`` bytes with ``topic`` exceeds :attr:`max_payload`
        (the server would refuse it; the client would not even send it)."""
        return payload + len(topic.encode()) + HEADER_ROOM > self.max_payload

    @property
    def last_error(self) -> str:
        """The client's most recent connection error, for messages."""
        return self._root._last_error

    async def _note_error(self, exc: Exception) -> None:
        self._last_error = f"{type(exc).__name__}: {exc}"

    def _call(self, coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
        if self._loop.is_closed() or not self._loop.is_running():
            coro.close()
            msg = f"the link to the stream {self.stream} is closed"
            raise Closed(msg)
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        return future.result(timeout=None if timeout is None else timeout + 1.0)

    # -- the stream ------------------------------------------------------------------------

    def stream_metadata(self) -> dict[str, str] | None:
        """The stream's metadata, ``None`` when there is no such stream."""
        found: dict[str, str] | None

        async def info() -> dict[str, str] | None:
            try:
                found = await self._js.stream_info(self.stream)
            except NotFoundError:
                return None
            return dict(found.config.metadata or {})

        found = self._retrying(info)
        return found

    def create_stream(self, subjects: list[str], replicas: int, metadata: dict[str, str]) -> None:
        """Create the stream (a 2.12+ server: atomic batches), file-backed, replicated."""
        config = StreamConfig(
            name=self.stream,
            subjects=subjects,
            num_replicas=replicas,
            allow_atomic=True,
            metadata=metadata,
        )

        async def add() -> None:
            await self._js.add_stream(config)

        self._retrying(add)

    def delete_stream(self) -> None:
        """Delete the stream (every message, on every server)."""

        async def delete() -> None:
            await self._js.delete_stream(self.stream)

        self._retrying(delete)

    def last_seq(self) -> int:
        """The stream's newest sequence, as its leader says."""

        async def info() -> int:
            found = await self._js.stream_info(self.stream)
            return int(found.state.last_seq)

        return int(self._retrying(info))

    def next_seq(self, after: int, subjects: str) -> int | None:
        """The sequence of the stream's first message of ``subjects`` after ``after``, as
        its leader says; ``None`` when there is none (deleted, or never published)."""

        async def get() -> int | None:
            try:
                found = await self._js.get_msg(
                    self.stream, seq=after + 1, subject=subjects, next=True
                )
            except NotFoundError:
                return None
            return int(found.seq or 0)

        found: int | None = self._retrying(get)
        return found

    def purge(self, subject: str, below: int) -> None:
        """Delete every message of ``subject`` before sequence ``below`` on every replica."""

        async def purge() -> None:
            await self._js.purge_stream(self.stream, seq=below, subject=subject)

        self._retrying(purge)

    def erase(self, seqs: Sequence[int]) -> None:
        """Delete each message at ``seqs`` on every replica, its bytes overwritten in the
        stream's files (the server's default for a message delete); one already gone is
        fine. Sent :data:`ERASE_AT_ONCE` at a time."""
        for start in range(0, len(seqs), ERASE_AT_ONCE):
            chunk = list(seqs[start : start + ERASE_AT_ONCE])

            async def delete(chunk: list[int] = chunk) -> None:
                subject = f"$JS.API.STREAM.MSG.DELETE.{self.stream}"
                replies = await asyncio.gather(
                    *(
                        self._nc.request(
                            subject, json.dumps({"seq": seq}).encode(), timeout=self.timeout
                        )
                        for seq in chunk
                    )
                )
                for reply in replies:
                    error = json.loads(reply.data or b"{}").get("error")
                    if error and int(error.get("err_code", 0)) != MESSAGE_NOT_FOUND:
                        raise Refused(int(error.get("err_code", 0)), str(error.get("description")))

            self._retrying(delete)

    def _retrying(self, make: Any) -> Any:
        """Run ``make()`` until it succeeds, retrying while the cluster has no leader or
        no server answers, for at most the link's timeout."""
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                return self._call(self._within(make), ATTEMPT_SECONDS)
            except (NotFoundError, Refused, Closed):
                raise
            except Exception as exc:  # noqa: BLE001 - any failure is retried until the deadline
                if time.monotonic() >= deadline:
                    msg = (
                        f"the stream {self.stream} did not answer in {self.timeout:g} s: "
                        f"{self._detail(exc)}"
                    )
                    raise Unavailable(msg) from None
                time.sleep(_RETRY_PAUSE_SECONDS)

    def _detail(self, exc: BaseException) -> str:
        """A failure on one line, with the client's last connection error when it had one."""
        detail = " ".join(str(exc).split()) or type(exc).__name__
        if self.last_error:
            detail += f" (the client's last error: {' '.join(self.last_error.split())})"
        return detail

    async def _within(self, make: Any) -> Any:
        return await asyncio.wait_for(make(), min(ATTEMPT_SECONDS, self.timeout))

    # -- publishing --------------------------------------------------------------------------

    def publish(self, messages: Sequence[Outgoing]) -> int:
        """Publish ``messages``, all or none (one message, or one atomic batch), and return
        the stream sequence of the last; retried with the same message ids while no answer
        comes, so a retry never stores a message twice. Raises :class:`Refused`."""
        if not 0 < len(messages) <= BATCH_LIMIT:
            msg = f"one publish holds 1 to {BATCH_LIMIT} messages, not {len(messages)}"
            raise ValueError(msg)
        deadline = time.monotonic() + self.timeout
        while True:
            left = max(deadline - time.monotonic(), 0.5)
            attempt = min(left, ATTEMPT_SECONDS)
            try:
                ack = self._direct.run(partial(self._publish, messages, attempt), attempt)
                if ack is None:
                    ack = self._call(self._publish(messages, attempt, self._nc), left)
            except Closed:
                raise
            except (TimeoutError, nats.errors.Error) as exc:
                if time.monotonic() >= deadline:
                    msg = f"no acknowledgement from the stream {self.stream}: {self._detail(exc)}"
                    raise Unavailable(msg) from None
                time.sleep(_RETRY_PAUSE_SECONDS)
                continue
            error = ack.get("error")
            if error:
                code = int(error.get("err_code", 0))
                if code in (503, 10008) and time.monotonic() < deadline:  # no leader yet
                    time.sleep(_RETRY_PAUSE_SECONDS)
                    continue
                raise Refused(code, str(error.get("description", "")))
            return int(ack["seq"])

    @staticmethod
    async def _publish(messages: Sequence[Outgoing], timeout: float, nc: Client) -> dict[str, Any]:
        """One try of a publish on the connection ``nc``: its acknowledgement (or error)."""
        if len(messages) == 1:
            only = messages[0]
            reply = await nc.request(only.subject, only.data, timeout=timeout, headers=only.headers)
            return _ack(reply)
        batch = uuid4().hex
        last = len(messages)
        for number, message in enumerate(messages, start=1):
            headers = {
                **message.headers,
                BATCH_ID_HEADER: batch,
                "Nats-Batch-Sequence": str(number),
            }
            if number == last:
                headers[BATCH_COMMIT_HEADER] = "1"
            if number in (1, last):  # the first is acknowledged (empty), the last committed
                reply = await nc.request(
                    message.subject, message.data, timeout=timeout, headers=headers
                )
                if number == last or reply.data:
                    return _ack(reply)
            else:
                await nc.publish(message.subject, message.data, headers=headers)
        msg = "unreachable"
        raise AssertionError(msg)

    # -- the ordered consumer ----------------------------------------------------------------

    def follow(self, after: int, subjects: str) -> None:
        """Start delivering every message of ``subjects`` after sequence ``after``, in stream
        order, into the buffer :meth:`take` drains (anything an earlier consumer left there
        is dropped: this one delivers from ``after`` on)."""
        with self._arrived:
            self._highest = after
            self._delivered = []
        self._subjects = subjects
        self._subscribe()

    def unfollow(self) -> None:
        """End the ordered consumer and drop what it buffered; :meth:`follow` starts again."""
        subscription, self._subscription = self._subscription, None
        self._subjects = ""
        if subscription is not None:

            async def stop() -> None:
                await subscription.unsubscribe()

            with contextlib.suppress(Exception):  # a consumer already gone is as good
                self._call(asyncio.wait_for(stop(), 5.0), 5.0)
        with self._arrived:  # after the unsubscribe: nothing more is delivered
            self._delivered = []

    def _subscribe(self) -> None:
        """(Re)start the ordered consumer just after the newest message delivered. Each
        consumer delivers the stream in order without a gap, so keeping only messages past
        the newest one delivered is right even while an old one still delivers."""

        async def deliver(msg: Msg) -> None:
            metadata = msg.metadata
            seq = metadata.sequence.stream
            delivered = Delivered(seq, msg.subject, dict(msg.headers or {}), msg.data)
            with self._arrived:
                if seq > self._highest:
                    self._delivered.append(delivered)
                    self._highest = seq
                    self._pending = metadata.num_pending or 0
                    self._arrived.notify_all()

        with self._arrived:
            start = self._highest + 1
        old, self._subscription = self._subscription, None

        async def subscribe() -> Any:
            if old is not None:
                with contextlib.suppress(Exception):
                    await old.unsubscribe()
            config = ConsumerConfig(
                deliver_policy=DeliverPolicy.BY_START_SEQUENCE, opt_start_seq=start
            )
            return await self._js.subscribe(
                self._subjects,
                cb=deliver,
                stream=self.stream,
                ordered_consumer=True,
                config=config,
                idle_heartbeat=HEARTBEAT_SECONDS,
                inactive_threshold=INACTIVE_SECONDS,
            )

        self._subscription = self._retrying(subscribe)

    @property
    def following(self) -> bool:
        """Whether this link has an ordered consumer (see :meth:`follow`)."""
        return bool(self._subjects)

    def release(self) -> None:
        """End every wait in :func:`wait_whole` on this link, now and later (the store is
        closing)."""
        with self._arrived:
            self._released = True
            self._arrived.notify_all()

    def take_ready(self, ends: Callable[[Delivered], bool]) -> list[Delivered]:
        """The buffered messages up to the last that ``ends`` a publish (the rest stay
        buffered); none waits."""
        with self._arrived:
            return self._whole_through(self._highest, ends)

    def _whole_through(self, through: int, ends: Callable[[Delivered], bool]) -> list[Delivered]:
        """Take the buffered messages up to the last one at or before ``through`` that
        ``ends`` a publish (the rest stay buffered); the caller holds ``_arrived``."""
        cut = len(self._delivered)
        while cut and (
            self._delivered[cut - 1].seq > through or not ends(self._delivered[cut - 1])
        ):
            cut -= 1
        taken, self._delivered = self._delivered[:cut], self._delivered[cut:]
        return taken

    def put_back(self, messages: list[Delivered]) -> None:
        """Return taken ``messages`` to the front of the buffer (their apply failed), so the
        next take gets them again rather than the messages after them."""
        with self._arrived:
            self._delivered[:0] = messages

    def take(self, through: int, ends: Callable[[Delivered], bool]) -> list[Delivered]:
        """The buffered messages up to the last one at or before sequence ``through`` that
        ``ends`` a publish, once all up to ``through`` have arrived (the rest stay buffered);
        raises :class:`Unavailable` when none arrives for the link's timeout. A consumer that
        delivers nothing for :data:`STALL_SECONDS` while messages are due is asked about
        first: when the stream holds no message up to ``through`` after the newest delivered
        (they were deleted: the stream's newest sequence stays at a deleted one), a
        :class:`Delivered` saying so (``deleted_from``) stands in for them and the take
        returns; else (its server died, say) it is replaced by a new one starting where it
        stopped."""
        deadline = time.monotonic() + self.timeout
        stalled_since = time.monotonic()
        seen = -1
        while True:
            with self._arrived:
                if self._highest >= through:
                    # Only whole publishes: the stream's newest sequence may be read while
                    # an atomic batch is being stored, so it can fall inside one.
                    return self._whole_through(through, ends)
                now = time.monotonic()
                if self._highest != seen:
                    seen, stalled_since = self._highest, now
                    deadline = now + self.timeout
                if now >= deadline:
                    msg = (
                        f"the stream {self.stream} delivered up to {self._highest}, not "
                        f"{through}, and nothing more came in {self.timeout:g} s"
                    )
                    raise Unavailable(msg)
                if now - stalled_since < STALL_SECONDS:
                    self._arrived.wait(min(deadline - now, STALL_SECONDS))
                    continue
            stalled_since = time.monotonic()
            with contextlib.suppress(Unavailable):
                if not self._deleted_through(through):
                    self._subscribe()

    def _deleted_through(self, through: int) -> bool:
        """Whether the stream holds no message after the newest delivered up to ``through``:
        then one :class:`Delivered` with ``deleted_from`` stands in for them in the buffer
        (no message can come there later: sequences only grow)."""
        with self._arrived:
            after = self._highest
        found = self.next_seq(after, self._subjects)
        if found is not None and found <= through:
            return False
        with self._arrived:
            if self._highest == after:
                self._delivered.append(Delivered(through, "", {}, b"", deleted_from=after + 1))
                self._highest = through
                self._arrived.notify_all()
        return True

    # -- closing -----------------------------------------------------------------------------

    def close(self) -> None:
        """End the consumer; for the link that made the connection, close the connection
        and stop the loop thread too (every link made ``via`` it stops working)."""
        if self._loop.is_closed():
            return
        self.unfollow()
        if self._root is not self:
            return
        self._direct.close()

        async def close() -> None:
            await self._nc.close()

        with contextlib.suppress(Exception):  # closing what may already be gone
            self._call(asyncio.wait_for(close(), 5.0), 5.0)
        self._stop_loop()

    def _stop_loop(self) -> None:
        """Cancel what the client leaves running (an ordered consumer's checks, a connect
        that timed out), then stop the loop and its thread."""

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(_cancel_the_rest(), self._loop).result(5.0)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        # At interpreter exit (a store never closed, collected then) the loop's thread may be
        # frozen with the loop still marked running: leave it; the process is ending.
        if not self._thread.is_alive() and not self._loop.is_running():
            self._loop.close()


async def _cancel_the_rest() -> None:
    """Cancel every task of the running loop but the caller's (what a client leaves running:
    its reads, pings and flushes, an ordered consumer's checks) and wait for them to end."""
    current = asyncio.current_task()
    tasks = [task for task in asyncio.all_tasks() if task is not current]
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


def wait_whole(
    links: Sequence[JetStreamLink], ends: Callable[[Delivered], bool], wait: float, batch: int
) -> bool:
    """Whether one of ``links`` (all on one connection) buffers a whole publish (a message
    that ``ends`` one), waiting up to ``wait`` seconds for one whose stream has nothing more
    due (no message after the newest delivered) or that buffers ``batch`` messages: a
    consumer catching up on a long stream is so taken in batches, not message by message
    (and a count of what is due that never comes down, its messages deleted meanwhile,
    costs at most ``wait``). False once a link is released."""
    arrived = links[0]._arrived
    if any(link._arrived is not arrived for link in links):
        msg = "links waited on together share one connection"
        raise ValueError(msg)

    def whole(link: JetStreamLink) -> bool:
        return any(ends(message) for message in reversed(link._delivered))

    def ready() -> bool:
        return any(
            link._released
            or ((link._pending == 0 or len(link._delivered) >= batch) and whole(link))
            for link in links
        )

    with arrived:
        found = arrived.wait_for(ready, wait) or any(whole(link) for link in links)
        return found and not any(link._released for link in links)


def _ack(reply: Msg) -> dict[str, Any]:
    """A publish's acknowledgement (or its error), as the server's JSON."""
    if reply.headers and reply.headers.get("Status") == "503":
        return {"error": {"err_code": 503, "description": "no responders"}}
    found: dict[str, Any] = json.loads(reply.data or b"{}")
    return found
