"""A server certificate read from files and read again when they change, without a restart.

gpupool's servers (the admission webhook, the control plane's API) get their certificate from a
mounted Secret, which cert-manager or an operator renews before it expires. A server that reads
the files once keeps serving the old certificate until it is restarted, and for the webhook,
with ``failurePolicy: Fail``, every gpupool pod is refused once that certificate expires.

So every TLS handshake first looks at the files (a ``stat`` of each, microseconds): when they
changed, a fresh :class:`ssl.SSLContext` is built from them and the handshake, and every later
one, switches to it from the server name callback, which OpenSSL calls for every ClientHello,
with or without SNI. Connections already open keep the context they were made with; nothing is
restarted, and a request in flight never fails because of a renewal.

A kubelet updates a mounted Secret by writing a new folder and swapping the ``..data`` symlink
in one rename, so the pair changes at once. Files written one after the other (``cp`` by hand)
can be read half-way, a new certificate with the old key: that pair does not load, the old
context stays in use and the files are tried again once they change again (the second write),
so the swap is never visible as a failed handshake.
"""

from __future__ import annotations

import logging
import os
import ssl
from pathlib import Path

log = logging.getLogger(__name__)

Signature = tuple[tuple[int, int, int, int], ...]


class CertificateError(ValueError):
    """The certificate or key cannot be loaded; the message names the option and the file."""


def _stat(path: Path) -> tuple[int, int, int, int]:
    info = os.stat(path)  # follows the ..data symlink: a swapped folder is a new inode
    return info.st_dev, info.st_ino, info.st_mtime_ns, info.st_size


class ReloadingCertificate:
    """The server side of TLS for one certificate and key pair, kept current with the files.

    Args:
        cert: PEM certificate (chain), e.g. ``/tls/tls.crt``.
        key: Its PEM private key, e.g. ``/tls/tls.key``.
        option: How the files were given (``--tls-cert/--tls-key``), for messages.

    Raises:
        CertificateError: The files cannot be read or do not form a pair.
    """

    def __init__(self, cert: Path, key: Path, option: str = "--tls-cert/--tls-key") -> None:
        self.cert, self.key, self.option = cert, key, option
        self.reloads = 0
        self._signature = self._files()
        self._current = self._build()
        self._server = self._current
        self._server.sni_callback = self._on_hello
        self._refused: Signature | None = None

    def _files(self) -> Signature:
        try:
            return (_stat(self.cert), _stat(self.key))
        except OSError as error:
            raise CertificateError(f"{self.option}: {error.filename}: {error.strerror}") from None

    def _build(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            context.load_cert_chain(self.cert, self.key)
        except (OSError, ssl.SSLError) as error:
            raise CertificateError(
                f"{self.option}: {self.cert} and {self.key} are not a certificate and its key: "
                f"{error}"
            ) from None
        return context

    def context(self) -> ssl.SSLContext:
        """The context to give the server (it switches to newer ones by itself)."""
        return self._server

    def refresh(self) -> bool:
        """Load the files again if they changed; True when the context was replaced.

        A pair that does not load leaves the current context in use (and is not tried again
        until the files change once more).
        """
        try:
            signature = self._files()
        except CertificateError as error:
            log.warning("%s; serving the certificate read before", error)
            return False
        if signature == self._signature or signature == self._refused:
            return False
        try:
            fresh = self._build()
        except CertificateError as error:
            self._refused = signature
            log.warning("%s; serving the certificate read before", error)
            return False
        self._current, self._signature, self._refused = fresh, signature, None
        self.reloads += 1
        log.info("%s: new certificate loaded from %s", self.option, self.cert)
        return True

    def _on_hello(
        self, connection: ssl.SSLObject | ssl.SSLSocket, server_name: str | None, _: ssl.SSLContext
    ) -> None:
        self.refresh()
        if connection.context is not self._current:
            connection.context = self._current
