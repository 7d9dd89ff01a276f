"""One attempt to deliver one notice on one route: a signed webhook, a Slack-compatible incoming
webhook, or an email; the answer judged by `kairos.core.notifications.judge_status`.

Every delivery carries the notice's id as its idempotency key (`Idempotency-Key` on HTTP, the
`Message-ID` and `X-Kairos-Notice-Id` of a mail), so a receiver recognises a redelivery.
Redirects are never followed: the route names where the notice goes, and a redirect would send
it (and its signature) elsewhere.
"""

from __future__ import annotations

import hashlib
import hmac
import http.client
import json
import smtplib
import ssl
import time
import urllib.parse
from dataclasses import dataclass
from email.message import EmailMessage

from kairos.core.notifications import Answer, Notice, Route, judge_status

SIGNATURE_HEADER = "X-Kairos-Signature"
USER_AGENT = "kairos-notifier"


@dataclass(frozen=True)
class Mail:
    """The SMTP server the notifier sends through, and who mails come from."""

    host: str
    port: int
    sender: str


def signature(secret: bytes, timestamp: int, body: bytes) -> str:
    """`t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>." + body>`: a receiver recomputes it with
    the route's secret and refuses a body that does not match or is old (replayed)."""
    mac = hmac.new(secret, f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"t={timestamp},v1={mac}"


def deliver(
    route: Route, notice: Notice, secret: bytes | None, mail: Mail | None, timeout_s: float
) -> tuple[Answer, str]:
    """Try once; what the receiver's answer means and why, in words."""
    try:
        if route.kind == "email":
            return _mail(route, notice, mail, timeout_s)
        if route.kind == "slack":
            assert route.slack is not None
            text = f"[Kairos] {notice.team}: {notice.summary}"
            return _post(route.slack, json.dumps({"text": text}).encode(), notice, {}, timeout_s)
        assert route.webhook is not None and secret is not None
        body = json.dumps(notice.document(), sort_keys=True).encode()
        signed = {SIGNATURE_HEADER: signature(secret, int(time.time()), body)}
        return _post(route.webhook, body, notice, signed, timeout_s)
    except (OSError, http.client.HTTPException) as error:
        return Answer.RETRY, f"no answer: {type(error).__name__}: {error}"
    except Exception as error:
        # A notice that cannot be sent (an input no check foresaw) must not stop the others.
        return Answer.GIVE_UP, f"cannot be sent: {type(error).__name__}: {error}"


def _post(
    url: str, body: bytes, notice: Notice, extra: dict[str, str], timeout_s: float
) -> tuple[Answer, str]:
    parts = urllib.parse.urlsplit(url)
    connection: http.client.HTTPConnection
    if parts.scheme == "https":
        connection = http.client.HTTPSConnection(
            parts.hostname or "",
            parts.port,
            timeout=timeout_s,
            context=ssl.create_default_context(),
        )
    else:
        connection = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=timeout_s)
    headers = {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        "Idempotency-Key": notice.notice_id,
        **extra,
    }
    path = parts.path or "/"
    try:
        connection.request("POST", path + (f"?{parts.query}" if parts.query else ""), body, headers)
        response = connection.getresponse()
        response.read(64 * 1024)
        return judge_status(response.status, response.getheader("Location"))
    finally:
        connection.close()


def _mail(route: Route, notice: Notice, mail: Mail | None, timeout_s: float) -> tuple[Answer, str]:
    if mail is None:
        return Answer.GIVE_UP, "the notifier has no SMTP server (--smtp-host); ask its operator"
    message = EmailMessage()
    # A summary may quote a job's output, line breaks included, which a header cannot hold.
    message["Subject"] = " ".join(f"[Kairos] {notice.team}: {notice.summary}".split())[:200]
    message["From"] = mail.sender
    message["To"] = ", ".join(route.email)
    digest = hashlib.sha256(notice.notice_id.encode()).hexdigest()[:32]
    message["Message-ID"] = f"<{digest}@kairos-notifier>"
    message["X-Kairos-Notice-Id"] = notice.notice_id
    message.set_content(json.dumps(notice.document(), indent=2, sort_keys=True))
    try:
        with smtplib.SMTP(mail.host, mail.port, timeout=timeout_s) as smtp:
            smtp.send_message(message)
    except smtplib.SMTPRecipientsRefused as refused:
        return Answer.GIVE_UP, f"the mail server refuses the recipients: {refused.recipients}"
    except smtplib.SMTPResponseException as error:
        # 4xx is the server's "try later", 5xx its "never".
        answer = Answer.RETRY if 400 <= error.smtp_code < 500 else Answer.GIVE_UP
        said = error.smtp_error
        text = said.decode(errors="replace") if isinstance(said, bytes) else said
        return answer, f"SMTP {error.smtp_code}: {text}"
    return Answer.DELIVERED, "mailed"
