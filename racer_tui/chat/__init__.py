"""The chat's parts that are neither screens nor widgets, and no Textual: the session, saved files, attachments, the step log."""
