"""Date and time formats for the portal's locale (``FORMAT_MODULE_PATH``)."""
