"""A plain TCP proxy in front of a server, which a test can cut and bring back on the same port:
a lost connection to Temporal, for real, without stopping the server or its workers."""

from __future__ import annotations

import asyncio


class CuttableProxy:
    def __init__(self, upstream: str):
        host, port = upstream.rsplit(":", 1)
        self.upstream = (host, int(port))
        self.port = 0
        self.connections = 0
        self._writers: set[asyncio.StreamWriter] = set()
        self._server: asyncio.Server | None = None

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    async def start(self) -> str:
        """Listen (again, on the same port once it has one)."""
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", self.port)
        self.port = self._server.sockets[0].getsockname()[1]
        return self.address

    async def cut(self) -> None:
        """Stop listening and drop every connection: the client sees the server gone."""
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None
        for writer in list(self._writers):
            writer.transport.abort()
        self._writers.clear()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        self._writers.update({writer, up_writer})

        async def pipe(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
            try:
                while data := await source.read(65536):
                    sink.write(data)
                    await sink.drain()
            except (ConnectionError, asyncio.IncompleteReadError):
                pass
            finally:
                sink.close()
                self._writers.discard(sink)

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer), return_exceptions=True)
