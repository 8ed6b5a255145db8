"""How a date and time reads wherever a template or the admin shows one without a format
of its own: unambiguous, to the second, and naming its time zone (reviewers, auditors and
admins may sit in different zones from the server's ``TIME_ZONE``)."""

DATETIME_FORMAT = "Y-m-d H:i:s T"
SHORT_DATETIME_FORMAT = "Y-m-d H:i T"
DATE_FORMAT = "Y-m-d"
SHORT_DATE_FORMAT = "Y-m-d"
TIME_FORMAT = "H:i:s"
