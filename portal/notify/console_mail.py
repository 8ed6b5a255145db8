"""The demo's e-mail backend: one line per message on the console (who to, and the
subject), so ``make run``'s output stays readable. Each delivery's whole message is in
the admin (Deliveries). Production sets ``EMAIL_BACKEND`` to SMTP."""

from __future__ import annotations

from typing import Any

from django.core.mail.backends import console


class OneLineEmailBackend(console.EmailBackend):
    def write_message(self, message: Any) -> None:
        recipients = ", ".join(message.recipients())
        self.stream.write(f"[e-mail to {recipients}] {message.subject}\n")
